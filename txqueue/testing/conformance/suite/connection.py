"""connect, is_connection_error, is_closed, apply_schema, transaction and errors: how a store
opens its connections, tells a lost one from a refused statement, applies its migrations,
wraps the caller's transaction and turns its driver's exceptions into StoreError."""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .... import Task
from ....errors import StoreError
from ..case import StoreCase, select

MISSING_TABLES = "the txqueue tables do not exist; run `txqueue init` first"
OLDER_TABLES = "the txqueue tables are older than this txqueue; run `txqueue init`"


class Boom(Exception):
    pass


@pytest.fixture
def bare(s: StoreCase, request: pytest.FixtureRequest) -> Iterator[Any]:
    """txqueue's connection to a database of the same store without txqueue's tables."""
    url = request.getfixturevalue(s.kind.empty_url_fixture)
    with contextlib.closing(s.store.connect(url)) as conn:
        yield conn


def store_error(cause: BaseException) -> StoreError:
    """A StoreError as ``errors`` raises it, from ``cause``."""
    exc = StoreError("x")
    exc.__cause__ = cause
    return exc


# --- connect ---------------------------------------------------------------------------


def test_txqueues_own_connection_commits_each_statement_by_itself(s: StoreCase) -> None:
    s.conn.execute("CREATE TABLE probe (x integer)")
    s.conn.execute("INSERT INTO probe VALUES (1)")
    assert select(s, "SELECT x FROM probe") == [(1,)]


def test_connecting_to_a_database_that_does_not_exist_fails_for_good(
    s: StoreCase, tmp_path: Path
) -> None:
    file = tmp_path / "missing.db"
    url, error = s.kind.missing(s.url, file)
    with pytest.raises(StoreError) as failed:
        s.store.connect(url)
    assert re.fullmatch(error, str(failed.value), re.DOTALL), str(failed.value)
    assert not file.exists()
    assert not s.store.is_connection_error(failed.value)


def test_create_makes_a_missing_sqlite_file_and_a_postgres_database_is_not_created(
    s: StoreCase, tmp_path: Path
) -> None:
    url, _ = s.kind.missing(s.url, tmp_path / "new.db")
    if s.kind.creates:
        with contextlib.closing(s.store.connect(url, create=True)):
            assert (tmp_path / "new.db").exists()
        return
    with pytest.raises(StoreError, match="does not exist"):
        s.store.connect(url, create=True)


# --- is_closed, is_connection_error ----------------------------------------------------


def test_a_closed_connection_is_closed_and_its_errors_are_worth_retrying(s: StoreCase) -> None:
    assert not s.store.is_closed(s.conn)
    s.conn.close()
    assert s.store.is_closed(s.conn)
    with pytest.raises(StoreError, match=r"^dashboard: ") as failed:
        s.store.workers(s.conn)
    assert s.store.is_connection_error(failed.value)


def test_a_refused_statement_is_not_a_connection_error(s: StoreCase, bare: Any) -> None:
    with pytest.raises(StoreError) as failed:
        s.store.workers(bare)
    assert not s.store.is_connection_error(failed.value)
    assert not s.store.is_closed(bare)


def test_which_driver_errors_are_worth_retrying(s: StoreCase) -> None:
    expected = list(s.kind.connection_errors)
    found = [(c, s.store.is_connection_error(store_error(c))) for c, _ in expected]
    assert found == expected
    assert not s.store.is_connection_error(StoreError("no cause"))
    assert not s.store.is_connection_error(store_error(OSError("connection reset")))


# --- apply_schema ----------------------------------------------------------------------


# --- transaction -----------------------------------------------------------------------


def test_a_transaction_commits_when_its_block_ends(s: StoreCase) -> None:
    app = s.app()
    with s.store.transaction(app):
        task = s.store.insert_task(app, Task("t", queue="q")).id
        assert s.rows() == []
    assert [r["id"] for r in s.rows()] == [task]


def test_a_transaction_on_txqueues_own_connection_commits_when_its_block_ends(
    s: StoreCase,
) -> None:
    with s.store.transaction(s.conn):
        task = s.store.insert_task(s.conn, Task("t", queue="q")).id
        assert s.rows() == []
    assert [r["id"] for r in s.rows()] == [task]


def test_a_transaction_rolls_back_when_its_block_raises(s: StoreCase) -> None:
    app = s.app()
    with pytest.raises(Boom), s.store.transaction(app):
        s.store.insert_task(app, Task("t", queue="q"))
        raise Boom
    assert s.rows() == []
    with s.store.transaction(app):  # the connection is usable still
        task = s.store.insert_task(app, Task("t", queue="q")).id
    assert [r["id"] for r in s.rows()] == [task]


def test_a_block_that_reads_then_writes_is_not_refused_for_a_write_between(
    s: StoreCase,
) -> None:
    """In WAL mode SQLite refuses at once (``database is locked``) to let a transaction that
    has read write after another connection wrote; the block takes the write lock first, so
    the other writer waits for it instead."""
    app = s.app()
    done = threading.Event()

    def write() -> None:
        with contextlib.closing(s.connect()) as other:
            s.store.insert_task(other, Task("t", queue="q"))
            other.commit()
        done.set()

    writer = threading.Thread(target=write)
    with s.store.transaction(app):
        assert s.store.get_task(app, uuid.uuid4()) is None
        writer.start()
        time.sleep(0.3)  # where nothing holds it back, the other write lands meanwhile
        s.store.insert_task(app, Task("t", queue="q"))
    writer.join(timeout=20)
    assert done.is_set()
    assert len(s.rows()) == 2


def test_inside_an_open_transaction_a_block_is_a_savepoint(s: StoreCase) -> None:
    app = s.app()
    outer = s.store.insert_task(app, Task("t", queue="q")).id
    with s.store.transaction(app):
        kept = s.store.insert_task(app, Task("t", queue="q")).id
    with pytest.raises(Boom), s.store.transaction(app):
        s.store.insert_task(app, Task("t", queue="q"))
        raise Boom
    assert s.rows() == []  # the caller's transaction is still open: it decides
    app.commit()
    assert sorted(r["id"] for r in s.rows()) == sorted([outer, kept])


def test_a_block_inside_a_transaction_rolled_back_is_rolled_back_with_it(s: StoreCase) -> None:
    app = s.app()
    s.store.insert_task(app, Task("t", queue="q"))
    with s.store.transaction(app):
        s.store.insert_task(app, Task("t", queue="q"))
    app.rollback()
    assert s.rows() == []


def test_blocks_nest_on_txqueues_own_connection(s: StoreCase) -> None:
    with s.store.transaction(s.conn):
        kept = s.store.insert_task(s.conn, Task("t", queue="q")).id
        with pytest.raises(Boom), s.store.transaction(s.conn):
            s.store.insert_task(s.conn, Task("t", queue="q"))
            raise Boom
    assert [r["id"] for r in s.rows()] == [kept]


# --- errors ----------------------------------------------------------------------------


def test_missing_tables_ask_for_txqueue_init_naming_the_action(s: StoreCase, bare: Any) -> None:
    calls: dict[str, Callable[[], object]] = {
        "dashboard": lambda: s.store.workers(bare),
        "leader lease": lambda: s.store.lead(bare, "cleaner", "a", 30),
        "worker presence": lambda: s.store.worker_seen(bare, "w", ["q"], ["t"]),
        "status": lambda: s.store.unhandled(bare),
        "schedule": lambda: s.store.list_schedules(bare),
        "periodic tasks": lambda: s.store.schedules_of(bare, ["q"], ["a"]),
    }
    for action, call in calls.items():
        with pytest.raises(StoreError) as failed:
            call()
        assert str(failed.value) == f"{action}: {MISSING_TABLES}"


def test_tables_older_than_txqueue_ask_for_txqueue_init(s: StoreCase) -> None:
    s.execute("ALTER TABLE txqueue_leaders DROP COLUMN expires_at")
    with pytest.raises(StoreError) as failed:
        s.store.lead(s.conn, "cleaner", "a", 30)
    assert str(failed.value) == f"leader lease: {OLDER_TABLES}"
    s.execute("ALTER TABLE txqueue_workers DROP COLUMN names")
    with pytest.raises(StoreError) as failed:
        s.store.unhandled(s.conn)
    assert str(failed.value) == f"status: {OLDER_TABLES}"


def test_a_driver_error_becomes_a_store_error_naming_the_action(s: StoreCase) -> None:
    detail = s.kind.syntax_error
    with pytest.raises(StoreError) as failed, s.errors("doing x"):
        s.conn.execute("SELECT nonsense FROM")
    assert str(failed.value) == f"doing x: {detail}"
    assert isinstance(failed.value.__cause__, s.kind.driver_error)
    with pytest.raises(StoreError) as failed, s.errors("doing x", s.url):
        s.conn.execute("SELECT nonsense FROM")
    assert str(failed.value) == f"doing x ({s.url}): {detail}"


def test_errors_lets_other_exceptions_through_unchanged(s: StoreCase) -> None:
    with pytest.raises(Boom), s.errors("doing x"):
        raise Boom
    refused = StoreError("already ours")
    with pytest.raises(StoreError) as failed, s.errors("doing x"):
        raise refused
    assert failed.value is refused
