"""RabbitMQ nodes of the test's own, beside the shared one: each with its own node name,
ports, data and log folders, stopped and deleted afterwards. One listens for TLS
(``tls.py``); three make a cluster (``tests/faults/test_rabbit_cluster.py``)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .helpers import free_port


@contextlib.contextmanager
def folder_of(user: str | None, prefix: str) -> Iterator[Path]:
    """A temporary folder that ``user`` owns (None: the tests' own user), deleted after."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        if user:
            shutil.chown(folder, user, user)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_user(name: str) -> str | None:
    """The user a server must run as: ``name`` when the tests run as root (servers refuse
    root, or are installed to run as their own user), else the tests' own."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(name)
    except KeyError:
        pytest.fail(
            f"user {name!r} is missing: apt-get install the package that adds it", pytrace=False
        )
    return name


def _program(name: str) -> str:
    """The real script, not Debian's wrapper in /usr/sbin (which switches to the rabbitmq
    user with ``su`` and writes the server's output to /var/log)."""
    for path in (f"/usr/lib/rabbitmq/bin/{name}", shutil.which(name)):
        if path and Path(path).exists():
            return path
    pytest.fail(
        f"{name} is needed for a private RabbitMQ node: apt-get install rabbitmq-server",
        pytrace=False,
    )


@dataclass
class Node:
    """A RabbitMQ node of the test's own, listening on 127.0.0.1:``port``."""

    name: str
    port: int
    folder: Path
    env: dict[str, str]
    user: str | None
    process: subprocess.Popen[bytes] | None = None

    def ctl(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [_program("rabbitmqctl"), "-n", self.name, *argv],
            env=self.env,
            user=self.user,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def logs(self) -> str:
        found = sorted(self.folder.rglob("*.log"))
        return "\n".join(f"--- {f}\n{f.read_text(errors='replace')[-3000:]}" for f in found)

    def start(self) -> None:
        """Boot in the background (``await_node`` waits for it), on the data it has."""
        with open(self.folder / "server.out", "ab") as out:
            self.process = subprocess.Popen(
                [_program("rabbitmq-server")],
                env=self.env,
                user=self.user,
                cwd=self.folder,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        """SIGKILL to the node and its helpers, as when its machine dies."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        """``rabbitmqctl stop``, as an operator would; killed if that does not end it."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        try:
            self.ctl("stop", timeout=30)
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        # The node's helpers (erl_child_setup, inet_gethost) live in its process group.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)


@contextlib.contextmanager
def private_node(config: Callable[[Path, int], str], prefix: str = "txq") -> Iterator[Node]:
    """Start a node whose ``rabbitmq.conf`` is ``config(folder, port)``, ``port`` being
    the free loopback port it is to listen on; stop and delete it after. It boots in the
    background: ``await_node`` waits for it. Every such node shares the Erlang cookie of
    the rabbitmq user (the shared node's too), so that they can form a cluster."""
    runs_as = as_user("rabbitmq")
    with folder_of(runs_as, f"{prefix}-rabbit-") as folder:
        plugins = folder / "enabled_plugins"
        plugins.write_text("[].\n")
        # Not /etc/rabbitmq/rabbitmq-env.conf: it names the shared node.
        env_file = folder / "rabbitmq-env.conf"
        env_file.write_text("")
        port = free_port()
        conf = folder / "rabbitmq.conf"
        conf.write_text(config(folder, port) + "log.console = false\nlog.file.level = info\n")
        home = pwd.getpwnam(runs_as).pw_dir if runs_as else os.environ.get("HOME", str(folder))
        distribution = "-kernel inet_dist_use_interface {127,0,0,1}"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,  # where the Erlang cookie is
            "LANG": "C.UTF-8",
            "RABBITMQ_NODENAME": f"{prefix}{uuid.uuid4().hex[:8]}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(folder / "mnesia"),
            "RABBITMQ_LOG_BASE": str(folder / "log"),
            "RABBITMQ_CONFIG_FILE": str(conf),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(folder / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins),
            "RABBITMQ_CONF_ENV_FILE": str(env_file),
            "RABBITMQ_PID_FILE": str(folder / "node.pid"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": distribution,
            "RABBITMQ_CTL_ERL_ARGS": distribution,
        }
        for sub in ("mnesia", "log"):
            (folder / sub).mkdir()
            if runs_as:
                shutil.chown(folder / sub, runs_as, runs_as)
        node = Node(env["RABBITMQ_NODENAME"], port, folder, env, runs_as)
        node.start()
        try:
            yield node
        finally:
            node.stop()


def await_node(node: Node, timeout: float = 60) -> None:
    """Wait until ``node`` listens and has booted; fail with its logs if it does not.
    ``rabbitmqctl await_startup`` fails at once while the node is not yet registered, so
    the port is watched first (a CLI call costs a second of CPU; a connect does not)."""
    assert node.process is not None
    deadline = time.monotonic() + timeout
    while node.process.poll() is None and time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", node.port)) == 0:
                break
        time.sleep(0.2)
    started = node.ctl("await_startup", "--timeout", "30", timeout=40)
    if started.returncode != 0:
        server_out = (node.folder / "server.out").read_text(errors="replace")[:6000]
        pytest.fail(
            f"private RabbitMQ node {node.name} did not start: {started.stderr.strip()}\n"
            f"{server_out}\n{node.logs()}",
            pytrace=False,
        )
