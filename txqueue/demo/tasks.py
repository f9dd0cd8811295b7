"""The demo's tasks: an online shop's, with handlers that note what they saw."""

from __future__ import annotations

import random
import threading
import time
import uuid
from dataclasses import dataclass, field

from ..tasks.context import TaskContext
from ..tasks.registry import Registry

QUEUE = "txqueue-demo"


@dataclass
class Book:
    """What the handlers saw, keyed by task id."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    committed: dict[uuid.UUID, float] = field(default_factory=dict)
    due: dict[uuid.UUID, float] = field(default_factory=dict)  # delayed: earliest start
    started: dict[uuid.UUID, float] = field(default_factory=dict)
    finished: dict[uuid.UUID, float] = field(default_factory=dict)
    successes: dict[uuid.UUID, int] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    alerts: int = 0


class Shop:
    """The demo's registry and its tasks, whose handlers write what they saw in ``book``."""

    def __init__(self, book: Book) -> None:
        self.registry = shop = Registry(on_failed=lambda failure: _count_alert(book))

        def note(ctx: TaskContext) -> None:
            with book.lock:
                book.started.setdefault(ctx.id, time.time())
                book.names.add(ctx.name)

        def done(ctx: TaskContext) -> None:
            with book.lock:
                book.finished[ctx.id] = time.time()
                book.successes[ctx.id] = book.successes.get(ctx.id, 0) + 1

        @shop.task("demo.send_email", queue=QUEUE, context=True)
        def send_email(ctx: TaskContext, to: str) -> dict[str, str]:
            note(ctx)
            time.sleep(random.uniform(0, 0.002))  # the SMTP call
            done(ctx)
            return {"sent_to": to}

        @shop.task("demo.charge_card", queue=QUEUE, backoff=0.5, context=True)
        def charge_card(ctx: TaskContext, order: int) -> str:
            note(ctx)
            if ctx.attempt == 1:
                raise ConnectionError("payment gateway timed out (the demo fails each once)")
            done(ctx)
            return "charged"

        @shop.task("demo.sync_crm", queue=QUEUE, max_attempts=3, backoff=0.2, context=True)
        def sync_crm(ctx: TaskContext, customer: int) -> None:
            note(ctx)
            raise ValueError(f"CRM rejects customer {customer} (the demo always fails)")

        @shop.task("demo.never", queue=QUEUE, context=True)
        def never(ctx: TaskContext) -> None:
            note(ctx)  # its transaction rolls back: this must never run

        self.send_email = send_email
        self.charge_card = charge_card
        self.sync_crm = sync_crm
        self.never = never


def _count_alert(book: Book) -> None:
    with book.lock:
        book.alerts += 1
