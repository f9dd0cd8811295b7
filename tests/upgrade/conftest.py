"""The rehearsal's fixtures: the previous release built and installed, a database of the
test's own on the shared server, and the two releases' processes run as a user runs them
(``python -m txqueue ...``), each logging to its own file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from . import release

OLD, NEW = release.PREVIOUS[0], "new"
APP = "tests.upgrade.apps:registry"
TABLES = """
CREATE TABLE upgrade_orders (
    task_id  uuid PRIMARY KEY,
    kind     text NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE upgrade_runs (
    task_id    uuid NOT NULL,
    attempt    integer NOT NULL,
    worker_id  text NOT NULL,
    release    text NOT NULL,
    code       text NOT NULL,
    raised     boolean NOT NULL,
    at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""


@pytest.fixture(scope="session")
def previous(request: pytest.FixtureRequest) -> Path:
    """The previous release's code, for the front of ``PYTHONPATH``: kept in pytest's cache,
    or with the cache off (``-p no:cacheprovider``) in the system's temporary directory."""
    cache = getattr(request.config, "cache", None)
    where = cache.mkdir("upgrade") if cache else Path(tempfile.gettempdir()) / "txqueue-upgrade"
    try:
        return release.installed(where)
    except release.ReleaseError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def upgrade_db(services: tuple[str, str]) -> Iterator[str]:
    """An empty database of this test's own (no schema: the previous release makes it),
    with the tables where the test's producers and handlers record what they did."""
    name = f"txqueue_upgrade_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(services[0], autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = urlunsplit(urlsplit(services[0])._replace(path="/" + name))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(TABLES)
    yield url
    with psycopg.connect(services[0], autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


class Releases:
    """Processes of either release on one database: the previous one's code from its
    install directory (run from a directory that does not hold this checkout's package,
    which ``python -m`` would put first), this one's from the checkout."""

    def __init__(self, previous: Path, db_url: str, tmp_path: Path) -> None:
        self.previous, self.db_url, self.tmp_path = previous, db_url, tmp_path
        self.gate = tmp_path / "gate"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: dict[int, Path] = {}

    def env(self, which: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TXQUEUE_", "PYTHON"))}
        path = [str(release.ROOT)] if which == NEW else [str(self.previous), str(release.ROOT)]
        env.update(
            PYTHONPATH=os.pathsep.join(path),
            TXQUEUE_DATABASE_URL=self.db_url,
            UPGRADE_RELEASE=which,
            UPGRADE_GATE=str(self.gate),
        )
        return env

    def _cwd(self, which: str) -> Path:
        return release.ROOT if which == NEW else self.tmp_path

    def run(self, which: str, *args: str, timeout: float = 60.0) -> str:
        """A command to its end; its output. Failing, it fails the test with its output."""
        done = subprocess.run(
            [sys.executable, "-m", *args],
            cwd=self._cwd(which),
            env=self.env(which),
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        out = done.stdout.decode() + done.stderr.decode()
        assert done.returncode == 0, f"{which}: {' '.join(args)} exited {done.returncode}:\n{out}"
        return done.stdout.decode()

    def start(self, which: str, label: str, *args: str) -> subprocess.Popen[bytes]:
        path = self.tmp_path / f"{label}.out"
        with path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", *args],
                cwd=self._cwd(which),
                env=self.env(which),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        self.logs[proc.pid] = path
        return proc

    def workers(self, which: str, queues: str, count: int = 2) -> list[subprocess.Popen[bytes]]:
        args = ("txqueue", "worker", "--app", APP, "--queues", queues, "--concurrency", "4")
        more = ("--poll-interval", "0.1", "--shutdown-timeout", "30")
        if which == NEW:
            # Its cleaner's passes move on what the old workers left (60 s apart by default).
            more += ("--cleaner-interval", "1s")
        return [self.start(which, f"{which}-worker-{i}", *args, *more) for i in range(count)]

    def stop(self, procs: Sequence[subprocess.Popen[bytes]], timeout: float = 60.0) -> list[int]:
        """SIGTERM each (once it is up: one still importing would die of the signal itself),
        then their exit codes; one that does not exit in time is killed and fails the test."""
        for proc in procs:
            self.wait_up(proc)
            proc.send_signal(signal.SIGTERM)
        codes = []
        for proc in procs:
            try:
                codes.append(proc.wait(timeout))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                raise AssertionError(f"{proc.args} did not stop within {timeout}s") from None
        return codes

    def wait_up(self, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while proc.poll() is None and "on queues" not in self.log(proc):
            assert time.monotonic() < deadline, f"{proc.args} did not start within {timeout}s"
            time.sleep(0.05)
        assert proc.poll() is None, f"{proc.args} exited {proc.returncode}:\n{self.log(proc)}"

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        return self.logs[proc.pid].read_text(errors="replace")

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def releases(previous: Path, upgrade_db: str, tmp_path: Path) -> Iterator[Releases]:
    group = Releases(previous, upgrade_db, tmp_path)
    yield group
    group.close()
