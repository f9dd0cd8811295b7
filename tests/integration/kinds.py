"""Every kind of application connection txqueue takes, each opened on a test's database
with the transaction block its own framework offers.

A kind is named ``driver`` or ``framework-driver``; ``KINDS[store]`` lists those that exist
for a store. ``open_kind`` yields an ``App``: ``conn`` (what the application passes to
txqueue), ``atomic()`` (its framework's block: commits at the end, rolls back on an
exception) and ``waits_for_commit`` (whether the framework tells txqueue when it commits,
so the wake-up goes after it rather than at once).

It also holds what the sync and asyncio contract tests enqueue and check alike.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest

import txqueue
from txqueue import Step, Task, Workflow
from txqueue.outbox import client, wakeup
from txqueue.outbox.notes import read_note
from txqueue.store.sqlite import path as sqlite_path

from .helpers import rows

KINDS = {
    "postgres": [
        "psycopg",
        "psycopg2",
        "sqlalchemy-psycopg",
        "sqlalchemy-psycopg2",
        "session-psycopg2",
        "django-psycopg",
    ],
    "sqlite": ["sqlite3", "sqlalchemy-pysqlite", "session-pysqlite", "django-sqlite"],
}


@contextlib.contextmanager
def no_broker() -> Iterator[None]:
    """This process's enqueues without a broker while the block runs."""
    client.configure(amqp_url=None)
    try:
        yield
    finally:
        client.configure()


class Woken:
    """The wake-ups this process sends for ``queue`` without a broker, each as the queue it
    names: on SQLite delivered in process, one per task, when sent; on PostgreSQL by NOTIFY,
    one per queue and transaction, when it commits, heard on a connection of the test's."""

    def __init__(self, queue: str, db_url: str) -> None:
        self.queue = queue
        self.notify = db_url.startswith("postgresql:")
        self._got: list[str] = []
        self._listener: psycopg.Connection[Any] | None = None
        if self.notify:
            self._listener = psycopg.connect(db_url, autocommit=True)
            self._listener.execute("LISTEN txqueue_wakeup")

    def __enter__(self) -> Woken:
        wakeup.subscribe_local([self.queue], self._local)
        return self

    def __exit__(self, *exc: object) -> None:
        wakeup.unsubscribe_local(self._local)
        if self._listener is not None:
            self._listener.close()

    def _local(self, woken: wakeup.Wakeup) -> None:
        self._got.append(self.queue)

    def heard(self, wait: float = 2.0) -> list[str]:
        """The wake-ups sent since the last call, waiting up to ``wait`` seconds for a
        first one (a notification comes once the commit has)."""
        if self._listener is not None:
            first = list(self._listener.notifies(timeout=wait, stop_after=1))
            rest = list(self._listener.notifies(timeout=0.05)) if first else []
            for note in first + rest:
                queue, _ = read_note(note.payload)
                if queue == self.queue:
                    self._got.append(queue)
        got, self._got = self._got, []
        return got


@dataclass
class App:
    conn: Any
    atomic: Callable[[], contextlib.AbstractContextManager[Any]]
    waits_for_commit: bool


def _sqlalchemy_url(db_url: str, driver: str) -> str:
    if db_url.startswith("sqlite:"):
        return db_url.replace("sqlite:", f"sqlite+{driver}:", 1)
    return db_url.replace("postgresql://", f"postgresql+{driver}://", 1)


@contextlib.contextmanager
def open_kind(kind: str, db_url: str) -> Iterator[App]:
    framework, _, driver = kind.rpartition("-")
    if framework == "django":
        yield from _django(db_url)
    elif framework in ("sqlalchemy", "session"):
        import sqlalchemy
        from sqlalchemy.orm import Session

        engine = sqlalchemy.create_engine(_sqlalchemy_url(db_url, driver))
        try:
            if framework == "session":
                with Session(engine) as session:
                    yield App(session, session.begin, True)
            else:
                with engine.connect() as conn:
                    yield App(conn, conn.begin, False)
        finally:
            engine.dispose()
    elif driver == "psycopg":
        with psycopg.connect(db_url) as conn:
            yield App(conn, conn.transaction, False)
    elif driver == "psycopg2":
        import psycopg2

        conn = psycopg2.connect(db_url)
        try:
            yield App(conn, lambda: conn, False)  # `with conn:` commits or rolls back
        finally:
            conn.close()
    else:
        conn = sqlite3.connect(sqlite_path(db_url), timeout=30)
        try:
            yield App(conn, lambda: conn, False)
        finally:
            conn.close()


_DJANGO_ALIASES = {"postgres": "pg", "sqlite": "lite"}


def _django(db_url: str) -> Iterator[App]:
    """Django's connection to the test's database: one alias per store, pointed at it."""
    import django
    from django.conf import settings
    from django.db import connections, transaction

    if not settings.configured:
        settings.configure(
            DATABASES={
                "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
                "pg": {"ENGINE": "django.db.backends.postgresql", "NAME": "unset"},
                "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": "unset"},
            },
            USE_TZ=True,
        )
        django.setup()
    alias = _DJANGO_ALIASES["sqlite" if db_url.startswith("sqlite:") else "postgres"]
    conn = connections[alias]
    conn.close()
    if alias == "lite":
        conn.settings_dict["NAME"] = sqlite_path(db_url)
    else:
        info = psycopg.conninfo.conninfo_to_dict(db_url)
        conn.settings_dict.update(
            NAME=info["dbname"],
            USER=info.get("user", ""),
            HOST=info.get("host", ""),
            PORT=info.get("port", ""),
        )
    try:
        yield App(conn, lambda: transaction.atomic(using=alias), True)
    finally:
        conn.close()


ASYNC_KINDS = {
    "postgres": [
        "psycopg",
        "asyncpg",
        "pool-asyncpg",
        "sqlalchemy-asyncpg",
        "session-asyncpg",
        "sqlalchemy-psycopg",
        "session-psycopg",
    ],
    "sqlite": ["aiosqlite", "sqlalchemy-aiosqlite", "session-aiosqlite"],
}


@dataclass
class AsyncApp:
    conn: Any
    atomic: Callable[[], contextlib.AbstractAsyncContextManager[Any]]
    waits_for_commit: bool


@contextlib.asynccontextmanager
async def open_async_kind(kind: str, db_url: str) -> AsyncIterator[AsyncApp]:
    """As ``open_kind``, for asyncio connections."""
    framework, _, driver = kind.rpartition("-")
    if framework in ("sqlalchemy", "session"):
        from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

        engine = create_async_engine(_sqlalchemy_url(db_url, driver))
        try:
            if framework == "session":
                async with AsyncSession(engine) as session:
                    yield AsyncApp(session, session.begin, True)
            else:
                async with engine.connect() as conn:
                    yield AsyncApp(conn, conn.begin, False)
        finally:
            await engine.dispose()
    elif driver == "psycopg":
        async with await psycopg.AsyncConnection.connect(db_url) as conn:
            yield AsyncApp(conn, conn.transaction, False)
    elif driver == "aiosqlite":
        import aiosqlite

        async with aiosqlite.connect(sqlite_path(db_url), timeout=30) as conn:
            yield AsyncApp(conn, lambda: _aiosqlite_block(conn), False)
    else:
        import asyncpg

        if framework == "pool":  # a connection taken from a pool
            pool = asyncpg.create_pool(db_url, min_size=1, max_size=1)
            async with pool, pool.acquire() as conn:
                yield AsyncApp(conn, conn.transaction, False)
        else:
            conn = await asyncpg.connect(db_url)
            try:
                yield AsyncApp(conn, conn.transaction, False)
            finally:
                await conn.close()


@contextlib.asynccontextmanager
async def _aiosqlite_block(conn: Any) -> AsyncIterator[None]:
    """aiosqlite's own way: work, then commit, or roll back on an exception."""
    try:
        yield
    except BaseException:
        await conn.rollback()
        raise
    await conn.commit()


def kind_db(kinds: dict[str, list[str]]) -> Any:
    """A ``db`` fixture: (kind, a fresh database of its store), once per kind of ``kinds``."""

    @pytest.fixture(
        params=[(store, kind) for store, names in kinds.items() for kind in names],
        ids=lambda param: str(param[1]),
    )
    def db(request: pytest.FixtureRequest) -> tuple[str, str]:
        store, kind = request.param
        return kind, str(request.getfixturevalue("pg_url" if store == "postgres" else "sqlite_url"))

    return db


def unique_and_delayed(queue: str) -> list[Task]:
    """The batch the unique-key contract test enqueues after ``Task("send",
    unique_key="k", delay=60)``: one plain, one holding the same key, one delayed."""
    return [
        Task("a", queue=queue),
        Task("send", queue=queue, unique_key="k"),
        Task("c", queue=queue, delay=timedelta(minutes=5)),
    ]


def check_unique_and_delayed(db_url: str, first: Any, again: Any, many: list[Any]) -> None:
    """The key's holder is returned, never inserted twice; delays count from the insert."""
    assert again == first and many[1] == first and len(set(many)) == 3
    by_id = {r["id"]: r for r in rows(db_url)}
    assert set(by_id) == {first, many[0], many[2]}
    delayed = by_id[first]["run_at"] - by_id[first]["created_at"]
    assert timedelta(seconds=59) < delayed <= timedelta(seconds=60)
    assert by_id[many[2]]["run_at"] - by_id[many[2]]["created_at"] > timedelta(minutes=4)


@dataclass(frozen=True)
class Parcel:
    """The argument of the contract suites' typed task."""

    sku: str
    weight: Decimal
    ships: date


PARCEL = Parcel("a-1", Decimal("2.50"), date(2026, 12, 1))
STORED = {"parcel": {"sku": "a-1", "weight": "2.50", "ships": "2026-12-01"}, "express": True}


def diamond(queue: str) -> tuple[Workflow, list[Step[Any]]]:
    """The workflow the contract tests enqueue: a first step, two after it (one delayed
    by nothing but its parent), and a join of both; the steps in order."""
    flow = Workflow("diamond")
    first = flow.add(Task("send", {"n": 1}, queue=queue))
    left = flow.add(Task("send", {"n": 2}, queue=queue), after=[first])
    right = flow.add(Task("send", {"n": 3}, queue=queue), after=[first])
    join = flow.add(Task("send", {"n": 4}, queue=queue), after=[left, right])
    return flow, [first, left, right, join]


def check_diamond(db_url: str, steps: list[Step[Any]], heard: list[str]) -> None:
    """Written whole, only its first step woken; a worker then runs it all, in order."""
    states = {r["id"]: r["state"] for r in rows(db_url)}
    assert states == {s.id: "pending" if i == 0 else "waiting" for i, s in enumerate(steps)}
    assert heard == [steps[0].task.queue]
    ran: list[int] = []
    registry = txqueue.Registry()
    registry.task("send", queue=steps[0].task.queue)(lambda payload: ran.append(payload["n"]))
    txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
    assert ran[0] == 1 and sorted(ran[1:3]) == [2, 3] and ran[3] == 4


def forked(queue: str) -> tuple[Workflow, list[Step[Any]]]:
    """A first step, one after it that needs it to succeed, one that runs however it ends."""
    flow = Workflow("forked")
    first = flow.add(Task("send", {"n": 1}, queue=queue))
    needs = flow.add(Task("send", {"n": 2}, queue=queue), after=[first])
    anyway = flow.add(Task("send", {"n": 3}, queue=queue), after=[first], on_failure="run")
    return flow, [first, needs, anyway]


def check_forked(db_url: str, steps: list[Step[Any]], heard: list[str]) -> None:
    """Its first step cancelled by hand: the second blocked, the third readied and woken
    (``heard``: the wake-ups the cancel sent)."""
    states = {r["id"]: r["state"] for r in rows(db_url)}
    assert [states[s.id] for s in steps] == ["cancelled", "cancelled", "pending"]
    assert heard == [steps[2].task.queue]
