"""TLS for the tests: a certificate authority made with ``openssl`` in a temporary folder,
and a RabbitMQ node of the test's own that listens for ``amqps://`` only, beside the
shared one (its own node name, ports, data and log folders; stopped and deleted
afterwards). The PostgreSQL side is a private cluster (``cluster.py``) with ``ssl=on``."""

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .helpers import free_port

LOOPBACK_NAMES = "IP:127.0.0.1,DNS:localhost"


def _openssl(*argv: str, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.fail(
            "openssl is needed to make test certificates: apt-get install openssl", pytrace=False
        )
    done = subprocess.run(["openssl", *argv], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"openssl {' '.join(argv)}: {done.stderr.strip()}", pytrace=False)


@dataclass(frozen=True)
class Authority:
    """A CA (``cert``, ``key``) in ``folder``, signing certificates for loopback."""

    folder: Path
    name: str

    @property
    def cert(self) -> Path:
        return self.folder / f"{self.name}.pem"

    @property
    def key(self) -> Path:
        return self.folder / f"{self.name}.key"

    @classmethod
    def create(cls, folder: Path, name: str) -> Authority:
        ca = cls(folder, name)
        _openssl(
            *("req", "-x509", "-new", "-nodes", "-days", "2", "-subj", f"/CN=txqueue test {name}"),
            *("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-addext", "basicConstraints=critical,CA:TRUE"),
            *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
            *("-keyout", str(ca.key), "-out", str(ca.cert)),
            cwd=folder,
        )
        return ca

    def issue(self, name: str, common_name: str, *, server: bool, passphrase: str = "") -> Pair:
        """A certificate and its key, ``name``.pem and ``name``.key: for a server, valid for
        127.0.0.1 and localhost; for a client, named ``common_name`` (PostgreSQL's
        ``clientcert=verify-full`` matches it to the user). With ``passphrase`` the key is
        encrypted with it."""
        pair = Pair(self.folder / f"{name}.pem", self.folder / f"{name}.key")
        usage = "serverAuth" if server else "clientAuth"
        extensions = self.folder / f"{name}.ext"
        lines = [
            "basicConstraints=CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            f"extendedKeyUsage={usage}",
            "subjectKeyIdentifier=hash",
            "authorityKeyIdentifier=keyid",
        ]
        if server:
            lines.append(f"subjectAltName={LOOPBACK_NAMES}")
        extensions.write_text("\n".join(lines) + "\n")
        request = self.folder / f"{name}.csr"
        key = ["-nodes"] if not passphrase else ["-passout", f"pass:{passphrase}"]
        _openssl(
            *("req", "-new", "-subj", f"/CN={common_name}", *key),
            *("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-keyout", str(pair.key), "-out", str(request)),
            cwd=self.folder,
        )
        _openssl(
            *("x509", "-req", "-in", str(request), "-days", "2", "-set_serial", _serial()),
            *("-CA", str(self.cert), "-CAkey", str(self.key), "-extfile", str(extensions)),
            *("-out", str(pair.cert)),
            cwd=self.folder,
        )
        pair.key.chmod(0o600)
        return pair


def _serial() -> str:
    return str(uuid.uuid4().int >> 64)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path

    def give_to(self, user: str | None, folder: Path) -> Pair:
        """A copy of the pair in ``folder``, owned by ``user`` (None: the tests' own user),
        its key readable by that user alone: servers refuse a key others can read, and run
        as users of their own."""
        copy = Pair(folder / self.cert.name, folder / self.key.name)
        for source, target in ((self.cert, copy.cert), (self.key, copy.key)):
            shutil.copyfile(source, target)
            if user:
                shutil.chown(target, user, user)
        copy.key.chmod(0o600)
        return copy


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


# -- RabbitMQ ----------------------------------------------------------------------------


def _rabbit_program(name: str) -> str:
    """The real script, not Debian's wrapper in /usr/sbin (which switches to the rabbitmq
    user with ``su`` and writes the server's output to /var/log)."""
    for path in (f"/usr/lib/rabbitmq/bin/{name}", shutil.which(name)):
        if path and Path(path).exists():
            return path
    pytest.fail(
        f"{name} is needed for a private TLS node: apt-get install rabbitmq-server", pytrace=False
    )


@dataclass
class Node:
    """A RabbitMQ node of the test's own, listening for TLS only on 127.0.0.1:``port``."""

    name: str
    port: int
    folder: Path
    env: dict[str, str]
    user: str | None
    process: subprocess.Popen[bytes] | None = None

    def ctl(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [_rabbit_program("rabbitmqctl"), "-n", self.name, *argv],
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


def _rabbit_config(
    folder: Path, port: int, ca: Path, server: Pair, user: str, password: str
) -> Path:
    config = folder / "rabbitmq.conf"
    config.write_text(
        f"default_user = {user}\n"
        f"default_pass = {password}\n"
        "listeners.tcp = none\n"
        f"listeners.ssl.default = 127.0.0.1:{port}\n"
        f"ssl_options.cacertfile = {ca}\n"
        f"ssl_options.certfile = {server.cert}\n"
        f"ssl_options.keyfile = {server.key}\n"
        # A client certificate is checked when one is given, and not required.
        "ssl_options.verify = verify_peer\n"
        "ssl_options.fail_if_no_peer_cert = false\n"
        "log.console = false\n"
        "log.file.level = info\n"
    )
    return config


@contextlib.contextmanager
def rabbit_node(ca: Path, server: Pair, user: str, password: str) -> Iterator[Node]:
    """Start a node listening for ``amqps://`` on a free loopback port with ``server``'s
    certificate, checking client certificates against ``ca`` (when a client gives one), its
    one user ``user`` with ``password``; stop and delete it after. The node boots in the
    background: ``await_node`` waits for it."""
    runs_as = as_user("rabbitmq")
    with folder_of(runs_as, "txqueue-rabbit-") as folder:
        key = server.give_to(runs_as, folder)
        authority = folder / "ca.pem"
        shutil.copyfile(ca, authority)
        plugins = folder / "enabled_plugins"
        plugins.write_text("[].\n")
        # Not /etc/rabbitmq/rabbitmq-env.conf: it names the shared node.
        env_file = folder / "rabbitmq-env.conf"
        env_file.write_text("")
        port = free_port()
        name = f"txqtls{uuid.uuid4().hex[:8]}@localhost"
        home = pwd.getpwnam(runs_as).pw_dir if runs_as else os.environ.get("HOME", str(folder))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,  # the Erlang cookie the shared node's rabbitmqctl uses too
            "LANG": "C.UTF-8",
            "RABBITMQ_NODENAME": name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(free_port()),  # unused: no plain listener
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(folder / "mnesia"),
            "RABBITMQ_LOG_BASE": str(folder / "log"),
            "RABBITMQ_CONFIG_FILE": str(
                _rabbit_config(folder, port, authority, key, user, password)
            ),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(folder / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins),
            "RABBITMQ_CONF_ENV_FILE": str(env_file),
            "RABBITMQ_PID_FILE": str(folder / "node.pid"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_CTL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }
        for sub in ("mnesia", "log"):
            (folder / sub).mkdir()
            if runs_as:
                shutil.chown(folder / sub, runs_as, runs_as)
        node = Node(name, port, folder, env, runs_as)
        out = open(folder / "server.out", "wb")  # noqa: SIM115 - closed below
        try:
            node.process = subprocess.Popen(
                [_rabbit_program("rabbitmq-server")],
                env=env,
                user=runs_as,
                cwd=folder,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                yield node
            finally:
                _stop(node)
        finally:
            out.close()


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


def _stop(node: Node) -> None:
    """``rabbitmqctl stop``, as an operator would; killed if that does not end it."""
    process = node.process
    if process is None or process.poll() is not None:
        return
    try:
        node.ctl("stop", timeout=30)
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
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
