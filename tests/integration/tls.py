"""TLS for the tests: a certificate authority made with ``openssl`` in a temporary folder,
and a RabbitMQ node of the test's own (``rabbit.py``) that listens for ``amqps://`` only.
The PostgreSQL side is a private cluster (``cluster.py``) with ``ssl=on``."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .rabbit import Node, as_user, private_node

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


# -- RabbitMQ ----------------------------------------------------------------------------


@contextlib.contextmanager
def rabbit_node(ca: Path, server: Pair, user: str, password: str) -> Iterator[Node]:
    """A node listening for ``amqps://`` only, with ``server``'s certificate, checking
    client certificates against ``ca`` (when a client gives one), its one user ``user``
    with ``password``. It boots in the background: ``await_node`` waits for it."""
    runs_as = as_user("rabbitmq")

    def config(folder: Path, port: int) -> str:
        key = server.give_to(runs_as, folder)
        authority = folder / "ca.pem"
        shutil.copyfile(ca, authority)
        return (
            f"default_user = {user}\n"
            f"default_pass = {password}\n"
            "listeners.tcp = none\n"
            f"listeners.ssl.default = 127.0.0.1:{port}\n"
            f"ssl_options.cacertfile = {authority}\n"
            f"ssl_options.certfile = {key.cert}\n"
            f"ssl_options.keyfile = {key.key}\n"
            # A client certificate is checked when one is given, and not required.
            "ssl_options.verify = verify_peer\n"
            "ssl_options.fail_if_no_peer_cert = false\n"
        )

    with private_node(config, prefix="txqtls") as node:
        yield node
