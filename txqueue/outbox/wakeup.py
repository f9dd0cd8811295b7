"""Wake-up messages without the broker: their encoding, shared by everyone who sends or
reads one, and their delivery within one process on SQLite, where no message carries
them (PostgreSQL's NOTIFY does, without a broker: ``notes``).

A wake-up is only a hint: the row is the truth, so a lost message delays a task until
the idle poll or the cleaner finds it, and never loses it.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

QUEUE_PREFIX = "txqueue."


def queue_name(queue: str) -> str:
    return QUEUE_PREFIX + queue


def routed(queue: str, database: str | None) -> str:
    """Where wake-ups of ``queue``'s tasks in the named ``database`` go (RabbitMQ's
    ``txqueue.<queue>@<database>``), each database's apart: a backlog's messages in one
    hold up no other's. None: the only database's, ``queue`` itself."""
    return queue if database is None else f"{queue}@{database}"


MAX_IDS = 1000  # per message: a batch's wake-up stays a few tens of kilobytes


def encode(task_id: uuid.UUID, xid: str | None, ripe: bool = False) -> bytes:
    """A task's wake-up; ``ripe``: it was due when enqueued (``Wakeup.ripe``)."""
    return _dump({"id": str(task_id), "xid": xid}, ripe)


def encode_many(task_ids: Sequence[uuid.UUID], xid: str | None, ripe: bool = False) -> bytes:
    """One wake-up for tasks written by one transaction (``enqueue_many``): RabbitMQ and
    both ends handle one message instead of one per task."""
    if len(task_ids) == 1:
        return encode(task_ids[0], xid, ripe)
    return _dump({"ids": [str(i) for i in task_ids], "xid": xid}, ripe)


def _dump(doc: dict[str, Any], ripe: bool) -> bytes:
    if ripe:
        doc["ripe"] = True
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Wakeup:
    """A decoded message's task to claim and the transaction that enqueued it."""

    id: uuid.UUID
    xid: str | None
    tag: int = 0
    generation: int = 0
    # Its message says every task it names was due when enqueued: a worker with no thread
    # free for them may leave them to its poll once their transaction has committed,
    # without reading their rows. Not said by the cleaner's messages nor an older txqueue's.
    ripe: bool = False


def _uuid(value: Any) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ValueError(f"id {str(value)[:64]!r} is not a UUID") from None


def decode(body: bytes) -> list[Wakeup]:
    """Parse a message body, ``{"id", "xid"}`` or ``{"ids": [...], "xid"}``, with or without
    ``"ripe": true``, into one wake-up per task; ValueError says what is wrong with it."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # nested past Python's limit
        raise ValueError("not JSON") from None
    if not isinstance(doc, dict) or ("id" in doc) == ("ids" in doc):
        raise ValueError('not an object with an "id" or "ids"')
    xid = doc.get("xid")
    if xid is not None and not (isinstance(xid, str) and xid.isdigit()):
        raise ValueError(f"xid {str(xid)[:32]!r} is not a transaction id")
    ripe = doc.get("ripe", False)
    if not isinstance(ripe, bool):
        raise ValueError(f"ripe {str(ripe)[:32]!r} is not true or false")
    if "id" in doc:
        return [Wakeup(_uuid(doc["id"]), xid, ripe=ripe)]
    ids = doc["ids"]
    if not isinstance(ids, list) or not 0 < len(ids) <= MAX_IDS:
        raise ValueError(f'"ids" is not a list of 1 to {MAX_IDS} ids')
    return [Wakeup(_uuid(i), xid, ripe=ripe) for i in ids]


class LocalDelivery:
    """Without a broker, one configuration's wake-ups handed to its workers in this process:
    a worker in the enqueuing process starts a task at once instead of at its next poll.
    Each ``txqueue.App`` has its own, so one App's wake-ups never reach another's workers;
    the module-level functions share ``LOCAL``."""

    def __init__(self) -> None:
        self._subscribers: dict[str, list[Callable[[Wakeup], None]]] = {}
        self._lock = threading.Lock()

    def subscribe(self, queues: Sequence[str], on_wakeup: Callable[[Wakeup], None]) -> None:
        with self._lock:
            for queue in queues:
                self._subscribers.setdefault(queue, []).append(on_wakeup)

    def unsubscribe(self, on_wakeup: Callable[[Wakeup], None]) -> None:
        with self._lock:
            for callbacks in self._subscribers.values():
                while on_wakeup in callbacks:
                    callbacks.remove(on_wakeup)

    def deliver(self, queue: str, body: bytes) -> None:
        """Pass a wake-up to one of the subscribed workers, if any (round robin)."""
        with self._lock:
            callbacks = self._subscribers.get(queue)
            if not callbacks:
                return
            callbacks.append(callbacks.pop(0))
            callback = callbacks[-1]
        for wakeup in decode(body):
            callback(wakeup)


LOCAL = LocalDelivery()
"""The in-process delivery of the module-level ``enqueue`` and of workers built directly."""


def subscribe_local(queues: Sequence[str], on_wakeup: Callable[[Wakeup], None]) -> None:
    """Hand this process's own wake-ups for ``queues`` (``LOCAL``'s) to ``on_wakeup``."""
    LOCAL.subscribe(queues, on_wakeup)


def unsubscribe_local(on_wakeup: Callable[[Wakeup], None]) -> None:
    LOCAL.unsubscribe(on_wakeup)


def deliver_local(queue: str, body: bytes) -> None:
    """Pass a wake-up to one of ``LOCAL``'s subscribed workers, if any (round robin)."""
    LOCAL.deliver(queue, body)
