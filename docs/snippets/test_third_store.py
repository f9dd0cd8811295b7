"""The store conformance suite run on a store declared as a third store's author declares
theirs: here txqueue's own SQLite store stands in for it, and one part of the suite runs
(``suite.leaders``; ``suite`` itself holds every test)."""

# --8<-- [start:kind]
import json
import re
import sqlite3
import uuid
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from txqueue.store import SQLITE
from txqueue.store.sqlite import errors, path
from txqueue.testing.conformance import StoreKind, store_kinds
from txqueue.testing.conformance.suite.leaders import *  # noqa: F403

pytest_plugins = ["txqueue.testing.conformance.plugin"]


@pytest.fixture
def my_url(tmp_path: Path) -> str:
    """A fresh database with txqueue's tables, for one test."""
    url = f"sqlite:///{tmp_path / 'txqueue.db'}"
    with closing(SQLITE.connect(url, create=True)) as conn:
        SQLITE.apply_schema(conn)
    return url


@pytest.fixture
def my_empty_url(tmp_path: Path) -> str:
    """A fresh database without them."""
    url = f"sqlite:///{tmp_path / 'bare.db'}"
    SQLITE.connect(url, create=True).close()
    return url


def connect(url: str, autocommit: bool = False) -> sqlite3.Connection:
    """An application's connection: in a transaction the caller commits, by default."""
    return sqlite3.connect(path(url), timeout=30, isolation_level=None if autocommit else "")


def rows(url: str, where: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    """The task rows, with PostgreSQL's Python types."""
    sql = f"SELECT * FROM txqueue_tasks WHERE {where} ORDER BY created_at, id"
    with closing(connect(url)) as c:
        c.row_factory = sqlite3.Row
        found = [dict(r) for r in c.execute(sql.replace("%s", "?"), params)]
    for row in found:
        for key, value in row.items():
            if value is None:
                continue
            if key in ("id", "workflow_id"):
                row[key] = uuid.UUID(value)
            elif key in (
                "payload",
                "result",
                "errors",
                "on_lease_expired",
                "events",
                "parents",
                "inputs",
            ):
                row[key] = json.loads(value)
            elif key.endswith(("_at", "_time", "_by")):
                row[key] = datetime.fromtimestamp(value, UTC)
        row["cancel_requested"] = bool(row["cancel_requested"])
    return found


async def open_async(url: str, autocommit: bool) -> Any:
    return await aiosqlite.connect(path(url), isolation_level=None if autocommit else "")


MY_STORE = StoreKind(
    name="mystore",
    store=SQLITE,
    url_fixture="my_url",
    empty_url_fixture="my_empty_url",
    connect=connect,
    rows=rows,
    errors=errors,
    driver_error=sqlite3.Error,
    placeholder="?",
    schema="schema.sqlite.sql",
    connection_errors=((sqlite3.OperationalError("database is locked"), True),),
    syntax_error="incomplete input",
    missing=lambda url, file: (
        f"sqlite:///{file}",
        re.escape(f"no SQLite database at '{file}': run `txqueue init` to create it there"),
    ),
    refuse_inserts=lambda when, message: [
        f"CREATE TRIGGER refuse BEFORE INSERT ON txqueue_tasks WHEN {when}"
        f" BEGIN SELECT RAISE(ABORT, '{message}'); END"
    ],
    open_async=open_async,
    current_xid=None,
    lock_waiters=None,
    creates=True,
    notifies=False,
    slots=False,
    atomic_batches=False,
    guards_commit=None,
    gaps={"test_a_claim_by_id_skips_a_row_another_transaction_holds": "no row locks"},
)

store_kind = store_kinds(MY_STORE)
# --8<-- [end:kind]
