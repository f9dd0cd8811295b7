"""The store conformance suite's fixture: each store in turn, on a fresh database, with
txqueue's own connection, an application's connection and the database's clock.

Tests call the store's methods directly (``s.store.claim_ids(s.conn, ...)``), with no
worker, thread or sleep: time moves with ``s.advance(seconds)``. A behaviour a store
cannot offer is declared with ``@pytest.mark.unsupported(sqlite="why")``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.integration.helpers import connect, execute, rows
from tests.store.kinds import StoreKind, other_database
from txqueue import Task
from txqueue.store import SQLITE, for_url
from txqueue.store.protocols import AnyStore
from txqueue.store.records import ClaimDefaults, Claimed, Inserted, Outcome
from txqueue.testing import Clock

WORKER = "host:1:w1"


def defaults(
    *names: str,
    timeout: float = 30.0,
    max_attempts: int = 3,
    per_name: dict[str, dict[str, Any]] | None = None,
) -> ClaimDefaults:
    """What a worker with handlers for ``names`` (default: "t") claims with."""
    known: dict[str, dict[str, Any]] = {n: {} for n in names or ("t",)}
    known.update(per_name or {})
    return ClaimDefaults(known, timeout, max_attempts)


@dataclass
class StoreCase:
    """One store on its own database.

    ``conn`` is txqueue's own connection (autocommit, as workers and cleaners use);
    ``app()`` opens an application's connection, in a transaction the test commits.
    """

    kind: StoreKind
    url: str
    store: AnyStore
    conn: Any
    clock: Clock
    _opened: list[Any] = field(default_factory=list)

    def errors(self, action: str, url: str | None = None) -> AbstractContextManager[None]:
        """The store's driver errors, raised as StoreError naming ``action``."""
        return self.kind.errors(action, url)

    def app(self) -> Any:
        c = connect(self.url)
        self._opened.append(c)
        return c

    def advance(self, seconds: float) -> None:
        """Move the database's clock forward, for every connection to it."""
        self.clock.advance(seconds)

    def now(self) -> datetime:
        return self.clock.now()

    def rows(self, where: str = "1 = 1", params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Task rows, with PostgreSQL's Python types on both stores."""
        return rows(self.url, where, params)

    def row(self, task_id: uuid.UUID) -> dict[str, Any]:
        (found,) = rows(self.url, "id = %s", (str(task_id),))
        return found

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        """One statement (``%s`` placeholders) in its own transaction; the row count."""
        return execute(self.url, sql, params)

    def insert(self, *tasks: Task) -> list[Inserted]:
        """Enqueue and commit, as an application does."""
        with contextlib.closing(connect(self.url)) as c:
            out = [self.store.insert_task(c, t) for t in tasks]
            c.commit()
        return out

    def enqueue(self, name: str = "t", payload: Any = None, **options: Any) -> uuid.UUID:
        """One committed task of the default test queue; its id."""
        options.setdefault("queue", "q")
        (inserted,) = self.insert(Task(name, {} if payload is None else payload, **options))
        return inserted.id

    def claim(
        self, *ids: uuid.UUID, worker: str = WORKER, with_: ClaimDefaults | None = None
    ) -> list[Claimed]:
        return self.store.claim_ids(self.conn, list(ids), worker, with_ or defaults())


@pytest.fixture
def s(store_kind: StoreKind, db_url: str) -> Iterator[StoreCase]:
    clock = Clock(db_url)  # before any connection: PostgreSQL sessions keep their clock
    store = for_url(db_url)
    conn = store.connect(db_url)
    case = StoreCase(store_kind, db_url, store, conn, clock)
    try:
        yield case
    finally:
        for c in case._opened:
            c.close()
        conn.close()
        clock.reset()


@pytest.fixture
def pg_empty_url(services: tuple[str, str]) -> Iterator[str]:
    """A fresh PostgreSQL database without txqueue's tables, dropped afterwards."""
    admin = services[0]
    name = f"txqueue_bare_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    try:
        yield other_database(admin, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def sqlite_empty_url(tmp_path: Path) -> str:
    """A fresh SQLite database file without txqueue's tables."""
    url = f"sqlite:///{tmp_path / 'bare.db'}"
    SQLITE.connect(url, create=True).close()
    return url


def select(s: StoreCase, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The rows of a query (``%s`` placeholders) on a connection of its own: for tables
    no store method reads back whole (txqueue_workers, txqueue_leaders, ...)."""
    with contextlib.closing(connect(s.url)) as c:
        sql = sql.replace("%s", s.kind.placeholder)
        return [tuple(r) for r in c.execute(sql, params).fetchall()]


def near(when: datetime | None, expected: datetime, within: float = 2.0) -> bool:
    """``when`` is ``expected`` give or take ``within`` seconds: the database's clock moves
    on while a test runs, and a loaded machine stretches the gaps between statements."""
    return when is not None and abs((when - expected).total_seconds()) <= within


def finish(
    s: StoreCase,
    task: Claimed,
    state: str,
    *,
    error: str | None = None,
    worker: str = WORKER,
    **outcome: Any,
) -> dict[uuid.UUID, str]:
    """Record the outcome of ``task``'s attempt as its worker would; ``error`` names an
    exception type for the error history."""
    entry = None
    if error is not None:
        entry = {"attempt": task.attempts, "type": error, "message": "boom", "traceback": None}
    outcome.setdefault("step", task.step)
    written = Outcome(task.id, task.attempts, worker, state, error=entry, **outcome)
    return s.store.record_outcomes(s.conn, [written])
