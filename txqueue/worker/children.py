"""A process pool's child, from the parent's side: starting it and waiting until it has
imported the application, the socket pair to it, and how it ended. The child's side is
``child``."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

from ..errors import PermanentError, WorkerError
from .board import Running
from .child import task_out

START_TIMEOUT = 60.0
"""Seconds a child has to import the registry and say it is ready."""
_RUN = "from txqueue.worker.child import run; run()"


class Child:
    """A child process, the parent's end of the socket pair to it, and the tasks sent to
    it, the first of them running (since ``began``), the others waiting there."""

    def __init__(self, process: subprocess.Popen[bytes], conn: Connection) -> None:
        self.process, self.conn, self.pid = process, conn, process.pid
        self.sent: deque[tuple[Running, float]] = deque()  # each with its wait before
        self.began = 0.0  # when the first of ``sent`` started (monotonic)
        self.told_cancel: set[uuid.UUID] = set()
        self.poller = select.poll()
        self.poller.register(conn.fileno(), select.POLLIN)
        try:  # readable once the child has ended (Linux): polled with its messages
            self.sentinel: int | None = os.pidfd_open(process.pid)
            self.poller.register(self.sentinel, select.POLLIN)
        except (AttributeError, OSError):
            self.sentinel = None

    @classmethod
    def start(cls) -> Child:
        """A new child, not ready yet (``handshake``). It dies with the thread that
        started it (PR_SET_PDEATHSIG)."""
        ours, theirs = socket.socketpair()
        # This process's path, for the child to import txqueue and the application from.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        with ours, theirs:
            process = subprocess.Popen(
                [sys.executable, "-c", _RUN, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                env=env,
            )
            return cls(process, Connection(ours.detach()))

    def handshake(self, options: dict[str, Any]) -> None:
        """Send the child its options and wait until it is ready. PermanentError if it
        cannot import the registry, WorkerError if it ends or stays silent first; the
        caller then kills and closes it."""
        deadline = time.monotonic() + START_TIMEOUT
        failure = f"did not start within {START_TIMEOUT:g}s"
        try:
            self.conn.send(("start", options))
            while self.ready(max(0.0, deadline - time.monotonic())):
                kind, value = self.conn.recv()
                if kind == "ready":
                    return
                if kind == "failed":  # no retry imports what is not there
                    raise PermanentError(f"a pool process could not start: {value}")
                forward_log(value)
        except (EOFError, OSError):
            failure = f"{how_ended(self.reap())} as it started"
        raise WorkerError(f"a pool process {failure}")

    def send(self, job: Running, waited: float) -> None:
        if not self.sent:
            self.began = time.monotonic()
        self.conn.send(("run", task_out(job.task, waited)))
        self.sent.append((job, waited))

    def ready(self, timeout: float) -> bool:
        """Whether a message (or the end) is there to read, waiting up to ``timeout``."""
        return bool(self.poller.poll(timeout * 1000)) and self.conn.poll()

    def ended(self) -> bool:
        return self.process.poll() is not None

    def reap(self, timeout: float = 5.0) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout)
        return self.process.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.reap()

    def close(self) -> None:
        self.conn.close()
        if self.sentinel is not None:
            os.close(self.sentinel)
            self.sentinel = None


def forward_log(record: dict[str, Any]) -> None:
    """A child's log record, to this process's logging."""
    rebuilt = logging.makeLogRecord(record)
    logging.getLogger(rebuilt.name).handle(rebuilt)


def how_ended(code: int | None) -> str:
    """How a child ended, for the attempt's error."""
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}" + (" (out of memory?)" if -code == signal.SIGKILL else "")
    return f"exited with status {code}"
