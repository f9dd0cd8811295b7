"""What a store's author declares for the conformance suite to run on it: a ``StoreKind``.

A kind says how to get a fresh database of its store, how to reach that database as an
application does, what its driver does differently (placeholders, error texts, SQL the
tests need to set a scene) and which traits the store has. Tests ask about a trait
(``s.kind.notifies``), never about a store's name, so a new store is one more declaration
(and its URL fixtures) and the suite runs unchanged. What a store cannot offer at all is
declared in ``gaps`` (txqueue's own stores declare theirs on the test:
``@pytest.mark.unsupported(sqlite="why")``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...store.protocols import AnyStore

Rows = Callable[[str, str, tuple[Any, ...]], list[dict[str, Any]]]
"""``rows(url, where, params)``: the task rows matching ``where`` (SQL with ``%s``
placeholders), oldest first, each a dict of every column of txqueue_tasks with
PostgreSQL's Python types (UUIDs, aware datetimes, decoded JSON, booleans)."""


@dataclass(frozen=True)
class StoreKind:
    """One store, as the conformance suite sees it."""

    name: str  # the test id, and the key of ``@pytest.mark.unsupported``
    store: AnyStore  # the store under test, as workers and enqueues would use it
    url_fixture: str  # a fresh database with the schema applied, for one test
    empty_url_fixture: str  # a fresh database without txqueue's tables
    connect: Callable[..., Any]  # ``connect(url, autocommit=False)``: an application's connection
    rows: Rows  # the task rows, read with PostgreSQL's Python types
    errors: Callable[..., AbstractContextManager[None]]  # the store's driver errors, as ours
    driver_error: type[Exception]  # the root of the driver's own exceptions
    placeholder: str  # the driver's parameter marker, for the tests' ``%s``
    schema: str  # the schema file, its migrations in order
    # (a lost connection's driver error, whether the store counts it worth retrying)
    connection_errors: tuple[tuple[BaseException, bool], ...]
    syntax_error: str  # the driver's text for the statement "SELECT nonsense FROM"
    # A database of the store that does not exist (a server's beside ``url``, else the
    # file ``file``), and the whole StoreError connecting to it, as a pattern.
    missing: Callable[[str, Path], tuple[str, str]]
    # Statements making each insert into txqueue_tasks matching ``when`` (SQL on NEW)
    # fail with ``message``.
    refuse_inserts: Callable[[str, str], list[str]]
    open_async: Callable[[str, bool], Awaitable[Any]]  # its native asyncio driver (url, autocommit)
    current_xid: str | None  # reads the transaction's id as wake-ups name it; None: no ids
    # How many sessions of the database at a URL wait for a lock; None: the store cannot tell.
    lock_waiters: Callable[[str], int] | None

    # --- traits ------------------------------------------------------------------------
    creates: bool  # connect(create=True) makes a missing database (a file)
    notifies: bool  # listen_finished: a listener woken when a task finishes
    slots: bool  # tasks live in slots turned by keep_slots
    atomic_batches: bool  # a batch on an autocommit connection is one transaction
    # The driver's error refusing a commit inside the block ``atomic`` opened; None: the
    # driver lets the commit through.
    guards_commit: type[Exception] | None
    # Tests of the suite (by function name) the store cannot pass, and why: each is
    # skipped with its reason, as ``@pytest.mark.unsupported(<name>="why")`` skips.
    gaps: Mapping[str, str] = field(default_factory=dict)

    @property
    def xids(self) -> bool:
        """Whether inserts name their transaction for the wake-ups."""
        return self.current_xid is not None
