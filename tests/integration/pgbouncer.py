"""A real PgBouncer in transaction mode in front of the test PostgreSQL, for the tests that
must hold through a pooler (Debian's ``pgbouncer``; ``tests/run`` installs it)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from .helpers import free_port

POOL_SIZE = 3  # few server sessions, so that transactions of many clients share each


@contextmanager
def pgbouncer(admin_url: str, *, pool_size: int = POOL_SIZE) -> Iterator[int]:
    """Start PgBouncer on a free loopback port, pooling transactions onto ``pool_size``
    server connections per database; yields its port."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.path.exists(binary):
        pytest.fail(
            "pgbouncer is not installed: apt-get install pgbouncer (bash tests/run does)",
            pytrace=False,
        )
    target = urlsplit(admin_url)
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="txqueue-pgbouncer-"))
    as_root = os.geteuid() == 0
    if as_root:  # PgBouncer will not run as root: it switches to ``user``, who writes here
        shutil.chown(folder, "postgres")
    (folder / "users.txt").write_text(f'"{target.username or "postgres"}" ""\n')
    password = f" password={target.password}" if target.password else ""
    user = f" user={target.username}" if target.username else ""
    (folder / "pgbouncer.ini").write_text(
        f"""[databases]
* = host={target.hostname or "127.0.0.1"} port={target.port or 5432}{user}{password}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder}/users.txt
pool_mode = transaction
default_pool_size = {pool_size}
max_client_conn = 500
logfile = {folder}/pgbouncer.log
{"user = postgres" if as_root else ""}
"""
    )
    # To a file, not a pipe: a pipe nobody reads would fill with its log and stall it.
    with open(folder / "said.txt", "wb") as said:
        proc = subprocess.Popen(
            [binary, str(folder / "pgbouncer.ini")], stdout=said, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    said = (folder / "said.txt").read_text(errors="replace").strip()
                    pytest.fail(f"pgbouncer did not start: {said[-2000:]}", pytrace=False)
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


def through(url: str, port: int, *, flag: bool = True) -> str:
    """``url`` with PgBouncer's port instead, and txqueue told of the pooler."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit(":", 1)[0] if parts.port else parts.netloc
    query = "pgbouncer=true" if flag else ""
    return urlunsplit(parts._replace(netloc=f"{netloc}:{port}", query=query))
