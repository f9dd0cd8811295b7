"""The example task module the README runs: ``txqueue worker --app workers.tasks:registry``."""

from __future__ import annotations

import logging
from typing import Any

import txqueue

log = logging.getLogger("workers.tasks")
registry = txqueue.Registry()


@registry.task("send_receipt", queue="example_emails", max_attempts=5, timeout=30)
def send_receipt(payload: dict[str, Any], ctx: txqueue.TaskContext) -> dict[str, Any]:
    """Pretend to e-mail a receipt; the return value is stored as the task's result."""
    log.info("receipt for order %s sent (attempt %d)", payload["order"], ctx.attempt)
    return {"sent_to": f"customer-of-order-{payload['order']}@example.com"}


@registry.on_failed
def alert(failure: txqueue.FailedTask) -> None:
    """Called once a task has failed for good: page someone, open a ticket."""
    log.error("task %s %s failed for good: %s", failure.name, failure.id, failure.reason)
