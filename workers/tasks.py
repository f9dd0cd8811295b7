"""The example task module the README runs: ``txqueue worker --app workers.tasks:registry``.

Enqueue from the application with ``send_receipt.enqueue(conn, order=42)``, in its own
transaction; ``txqueue enqueue send_receipt --payload '{"order": 42}' --queue
example_emails`` does the same from the shell.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import txqueue

log = logging.getLogger("workers.tasks")
registry = txqueue.Registry()


@dataclass(frozen=True)
class Receipt:
    sent_to: str


@registry.task(queue="example_emails", max_attempts=5, timeout=30, context=True)
def send_receipt(ctx: txqueue.TaskContext, order: int) -> Receipt:
    """Pretend to e-mail a receipt; the Receipt is stored as the task's result."""
    log.info("receipt for order %s sent (attempt %d)", order, ctx.attempt)
    return Receipt(sent_to=f"customer-of-order-{order}@example.com")


@registry.on_failed
def alert(failure: txqueue.FailedTask) -> None:
    """Called once a task has failed for good: page someone, open a ticket."""
    log.error("task %s %s failed for good: %s", failure.name, failure.id, failure.reason)
