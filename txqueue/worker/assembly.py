"""A worker's parts that talk to the database, made from its settings: the claimer, the
recorder, the lease keeper, the atomic runner and the scheduler, each on a link of its own,
and where its listener listens."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import config
from ..cleaner import recovery
from ..core.task import DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT
from ..errors import ConfigError, SchemaError, StoreError
from ..observability.horizon import Watch
from ..store.protocols import AnyStore, Notifies
from ..store.records import ClaimDefaults, Claimed
from ..tasks.registry import Registry
from .atomic import Atomic, Ready
from .board import Board
from .claimer import Claimer
from .leases import LeaseKeeper
from .link import Link, Outage
from .recorder import Recorder
from .scheduler import KeyFor, Scheduler
from .settings import Settled

WOKEN_POLL = 1.0
"""Seconds between a worker's idle polls by default when wake-ups reach it (RabbitMQ's,
NOTIFY's): the poll only finds what they missed."""
UNWOKEN_POLL = 0.1
"""The same where none can (a burst, SQLite across processes, a pooled URL to listen on)."""


@dataclass(frozen=True, slots=True)
class Shared:
    """What every part of one worker shares: its store, its board, one view of whether the
    database is down, and the two signals of its stop."""

    registry: Registry
    store: AnyStore
    settings: Settled
    board: Board
    outage: Outage
    horizon: Watch
    stopping: threading.Event
    stop_now: threading.Event

    def link(self) -> Link[Any]:
        """A connection of a part's own, so that one slow statement holds up no other."""
        return Link(self.store, self.settings.database_url, self.outage, self.named)

    def named(self, conn: Any) -> None:
        """Refuse a connection to a database of another name than the worker's, on each
        new one: its wake-ups would go to queues this worker does not read, and its
        transaction ids would be another database's (a URL may lead elsewhere after a
        failover, or a database out of reach at start was never checked)."""
        try:
            config.named_as(self.store.database_name(conn), self.settings.database)
        except ConfigError as exc:
            raise SchemaError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Parts:
    claimer: Claimer[Any]
    recorder: Recorder[Any]
    leases: LeaseKeeper[Any]
    atomic: Atomic[Any]
    scheduler: Scheduler[Any]


def assemble(
    shared: Shared,
    woken: bool,
    stop_deadline: Callable[[], float],
    readied: Callable[[Ready, list[Claimed]], list[Claimed]],
    wake: Callable[[list[tuple[str, bytes]]], None],
) -> Parts:
    """The parts, ``woken`` saying whether wake-ups reach the worker (its idle poll's
    default), the callables being the worker's own."""
    registry, store, s, board = shared.registry, shared.store, shared.settings, shared.board
    defaults = ClaimDefaults(registry.claim_defaults(), DEFAULT_TIMEOUT, DEFAULT_MAX_ATTEMPTS)
    poll = s.poll_interval
    claimer = Claimer(
        store,
        s.worker_id,
        s.queues,
        defaults,
        board,
        shared.link(),
        shared.stopping,
        poll_interval=poll if poll is not None else (WOKEN_POLL if woken else UNWOKEN_POLL),
        commit_wait=s.commit_wait,
    )
    recorder = Recorder(
        store,
        s.worker_id,
        registry,
        board,
        shared.link(),
        shared.stop_now,
        stop_deadline,
        claimer.inbox,
        readied,
        claimer.claim_next,
    )
    names = sorted(d.name for d in registry)
    leases = LeaseKeeper(
        store,
        s.worker_id,
        s.queues,
        names,
        board,
        shared.link(),
        shared.stop_now,
        shared.horizon,
        recovery.by_worker(store, s.worker_id, recorder.alert, wake),
    )
    atomic = Atomic(store, s.database_url, shared.outage, s.concurrency)
    # Every worker keeps its queues' schedules made at run time, as well as its own.
    schedules = [schedule for schedule in registry.schedules() if schedule.queue in s.queues]
    scheduler = Scheduler(
        store, schedules, s.queues, shared.link(), shared.stopping, wake, _key_for(registry)
    )
    return Parts(claimer, recorder, leases, atomic, scheduler)


def listening(store: Notifies[Any], database_url: str, listen_url: str | None) -> str | None:
    """Where the listener listens for wake-ups by NOTIFY: None where the database sends
    none (SQLite), or only through a transaction pooler (said at start)."""
    if not store.notifies:
        if listen_url is not None:
            raise ConfigError("listen_url: a SQLite database sends no wake-ups to listen for")
        return None
    from ..store.postgres import pooled

    if listen_url is not None and pooled(listen_url):
        raise ConfigError(
            "listen_url: goes through a transaction pooler (?pgbouncer=true), which cannot "
            "carry LISTEN: give a direct URL"
        )
    url = listen_url or database_url
    return None if pooled(url) else url


def check_schema(store: AnyStore, url: str, database: str | None) -> None:
    """Raise SchemaError at once if the tables are missing (ConfigError if the database
    does not bear its name), rather than start every part to find it out; a database not
    reachable yet is left to the parts, which wait for it."""
    try:
        with contextlib.closing(store.connect(url)) as conn:
            store.get_task(conn, uuid.UUID(int=0))
            config.named_as(store.database_name(conn), database)
    except SchemaError as exc:
        raise SchemaError(f"worker: {str(exc).split(': ', 1)[-1]}") from None
    except StoreError:
        pass


def _key_for(registry: Registry) -> KeyFor:
    """A run-time schedule's tasks' concurrency key, as their registration makes it."""

    def key(task: str, payload: Any) -> str | None:
        definition = registry.get(task)
        return None if definition is None else definition.concurrency_key(payload)

    return key
