"""Task modules the CLI tests load with --app, in separate worker processes."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import txqueue

registry = txqueue.Registry()


@registry.task("record", queue=os.environ.get("TXQUEUE_TEST_QUEUE", "default"))
def record(payload: Any, ctx: txqueue.TaskContext) -> dict[str, Any]:
    """Append ``id attempt`` to this process's file, so the test can count every run."""
    path = os.path.join(os.environ["TXQUEUE_TEST_RECORD_DIR"], f"{os.getpid()}.log")
    with open(path, "a") as f:
        f.write(f"{ctx.id} {ctx.attempt}\n")
    return {"pid": os.getpid()}


not_a_registry = object()


@registry.task("sleep", queue=os.environ.get("TXQUEUE_TEST_QUEUE", "default"))
def sleep(payload: Any) -> str:
    """Run for ``payload["seconds"]``: a task still in flight when the worker is signalled."""
    path = os.path.join(os.environ["TXQUEUE_TEST_RECORD_DIR"], "sleep.started")
    with open(path, "w") as f:
        f.write("started")
    time.sleep(float(payload["seconds"]))
    return "slept"


@registry.task("chatty", queue=os.environ.get("TXQUEUE_TEST_QUEUE", "default"), max_attempts=1)
def chatty(payload: Any) -> None:
    """Log on the application's own logger, then fail: the records name the task."""
    logging.getLogger("app.chatty").info("working on %s", payload["order"])
    raise RuntimeError("chatty gives up")


@registry.task(queue=os.environ.get("TXQUEUE_TEST_QUEUE", "typed_cli"), max_attempts=2)
def greet(name: str, times: int = 1) -> str:
    """A typed task: ``txqueue enqueue greet --app`` checks its payload against this."""
    return " ".join([f"hello {name}"] * times)
