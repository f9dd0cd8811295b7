"""What each test of the conformance suite is handed: one store on a fresh database, with
txqueue's own connection, an application's connection and the database's clock (a
``StoreCase``), and the steps the tests share (claim defaults, an attempt's outcome).

Tests call the store's methods directly (``s.store.claim_ids(s.conn, ...)``), with no
worker, thread or sleep: time moves with ``s.advance(seconds)``.
"""

from __future__ import annotations

import contextlib
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...core.task import Task
from ...store.protocols import AnyStore
from ...store.records import ClaimDefaults, Claimed, Inserted, Outcome
from ..clock import Clock
from .kind import StoreKind

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

    def connect(self, *, autocommit: bool = False) -> Any:
        """An application's connection, which the caller closes."""
        return self.kind.connect(self.url, autocommit=autocommit)

    def app(self) -> Any:
        """An application's connection, closed after the test."""
        c = self.connect()
        self._opened.append(c)
        return c

    def close(self) -> None:
        for c in self._opened:
            c.close()
        self.conn.close()

    def advance(self, seconds: float) -> None:
        """Move the database's clock forward, for every connection to it."""
        self.clock.advance(seconds)

    def now(self) -> datetime:
        return self.clock.now()

    def rows(self, where: str = "1 = 1", params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Task rows, with PostgreSQL's Python types on every store."""
        return self.kind.rows(self.url, where, params)

    def row(self, task_id: uuid.UUID) -> dict[str, Any]:
        (found,) = self.rows("id = %s", (str(task_id),))
        return found

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        """One statement (``%s`` placeholders) in its own transaction; the row count."""
        with contextlib.closing(self.connect()) as c:
            n = c.execute(sql.replace("%s", self.kind.placeholder), params).rowcount
            c.commit()
        return int(n)

    def insert(self, *tasks: Task) -> list[Inserted]:
        """Enqueue and commit, as an application does."""
        with contextlib.closing(self.connect()) as c:
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


def select(s: StoreCase, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The rows of a query (``%s`` placeholders) on a connection of its own: for tables
    no store method reads back whole (txqueue_workers, txqueue_leaders, ...)."""
    with contextlib.closing(s.connect()) as c:
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
