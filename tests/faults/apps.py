"""The registry the fault tests' worker processes run (--app tests.faults.apps:registry)."""

from __future__ import annotations

import os
import time
from typing import Any

import txqueue

registry = txqueue.Registry()
QUEUE = os.environ.get("TXQUEUE_TEST_QUEUE", "default")
LEASE = float(os.environ.get("TXQUEUE_TEST_LEASE", "2"))


def _note(line: str) -> None:
    # One write per line with O_APPEND: whole lines, even from a process killed mid-run.
    path = os.path.join(os.environ["TXQUEUE_TEST_RECORD_DIR"], f"{os.getpid()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@registry.task("record", queue=QUEUE, timeout=LEASE, max_attempts=50)
def record(payload: Any, ctx: txqueue.TaskContext) -> dict[str, Any]:
    """Note ``id attempt pid`` as it starts, then work for ``payload["sleep"]`` seconds."""
    _note(f"{ctx.id} {ctx.attempt} {os.getpid()}\n")
    time.sleep(float(payload.get("sleep", 0)))
    return {"pid": os.getpid()}
