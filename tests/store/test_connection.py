"""connect, is_connection_error, is_closed, apply_schema, transaction and errors: how a store
opens its connections, tells a lost one from a refused statement, applies its migrations,
wraps the caller's transaction and turns its driver's exceptions into StoreError."""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

import txqueue
from tests.integration import cluster
from tests.integration.helpers import connect
from tests.store.conftest import StoreCase, select
from tests.store.kinds import StoreKind, other_database
from txqueue import Task
from txqueue.errors import DatabaseLoginError, PermanentError, StoreError
from txqueue.store import PostgresStore
from txqueue.store.postgres import connection
from txqueue.store.sql import migrations, schema_text

MISSING_TABLES = "the txqueue tables do not exist; run `txqueue init` first"
OLDER_TABLES = "the txqueue tables are older than this txqueue; run `txqueue init`"


class Boom(Exception):
    pass


def versions(kind: StoreKind) -> list[int]:
    """Every migration of the store's schema file, in order."""
    return [v for v, _ in migrations(schema_text(kind.schema))[1]]


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


@pytest.mark.unsupported(postgres="a server's database has no directory of ours to miss")
def test_a_sqlite_file_in_a_missing_directory_is_refused_even_with_create(
    s: StoreCase, tmp_path: Path
) -> None:
    folder = tmp_path / "nowhere"
    url = f"sqlite:///{folder / 'txqueue.db'}"
    with pytest.raises(StoreError) as refused:
        s.store.connect(url)
    assert str(refused.value) == (
        f"no SQLite database at '{folder / 'txqueue.db'}': its directory '{folder}' does not "
        "exist; create it, then run `txqueue init`"
    )
    with pytest.raises(StoreError) as refused:
        s.store.connect(url, create=True)
    assert str(refused.value) == (
        f"no SQLite database at '{folder / 'txqueue.db'}': its directory '{folder}' does not exist"
    )
    assert not folder.exists()


def test_a_refusal_after_the_password_is_permanent_whatever_the_servers_language(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """libpq passes on no SQLSTATE for a failed connect, only the server's message, in the
    server's lc_messages. Read in no language at all here, a refusal that came once the
    server had the password (or had asked for one) is still told from an outage. Read in
    English, one for good is a DatabaseLoginError, which stops a worker at once; a role's
    connection limit, after the password too, stays an outage."""
    monkeypatch.setattr(connection, "_PERMANENT", re.compile(r"(?!)"))
    store = PostgresStore()
    # Where the cluster's user can read it (pytest's tmp_path is root's alone).
    folder = Path(tempfile.mkdtemp(prefix="txqueue-hba-"))
    hba = folder / "pg_hba.conf"
    hba.write_text(
        "host all app 127.0.0.1/32 scram-sha-256\nhost all all 127.0.0.1/32 trust\n"
        "local all all trust\n"
    )
    if cluster.AS:
        shutil.chown(folder, cluster.AS)
        shutil.chown(hba, cluster.AS)
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        server = stack.enter_context(cluster.cluster(hba_file=str(hba)))
        with psycopg.connect(server.url(), autocommit=True) as c:
            c.execute("CREATE ROLE app LOGIN PASSWORD 'right-pw'")
            c.execute("CREATE ROLE busy LOGIN PASSWORD 'right-pw' CONNECTION LIMIT 0")
        at = f"127.0.0.1:{server.port}"
        for url, permanent in (
            (f"postgresql://app:wrong-pw@{at}/postgres", True),
            (f"postgresql://app:right-pw@{at}/no_such_database", True),
            (f"postgresql://app@{at}/postgres", True),  # a password asked for, none given
            ("postgresql://app:right-pw@127.0.0.1:1/postgres", False),  # nothing listens
            # Without a password, a missing database is told by the English text alone.
            (f"postgresql://postgres@{at}/no_such_database", False),
        ):
            with pytest.raises(StoreError) as refused:
                store.connect(url)
            assert store.is_connection_error(refused.value) is not permanent, url
        monkeypatch.undo()  # the server's English words read again
        with pytest.raises(DatabaseLoginError, match="authentication failed"):
            store.connect(f"postgresql://app:wrong-pw@{at}/postgres")
        with pytest.raises(StoreError, match="too many connections") as full:
            store.connect(f"postgresql://busy:right-pw@{at}/postgres")
        assert not isinstance(full.value, PermanentError)
        assert store.is_connection_error(full.value)


@pytest.mark.unsupported(sqlite="a file has no password")
def test_a_postgres_connection_refused_never_shows_the_password(s: StoreCase) -> None:
    missing = other_database(s.url, "txqueue_no_such_database", password="s3cret-pw")
    with pytest.raises(StoreError) as refused:
        s.store.connect(missing)
    shown = missing.replace("s3cret-pw", "***")
    assert str(refused.value).startswith(f"cannot connect to PostgreSQL ({shown}): ")
    assert "s3cret-pw" not in str(refused.value)
    assert not s.store.is_connection_error(refused.value)

    closed_port = urlsplit(missing)._replace(netloc="postgres:s3cret-pw@127.0.0.1:1").geturl()
    with pytest.raises(StoreError) as unreachable:
        s.store.connect(closed_port)
    assert "s3cret-pw" not in str(unreachable.value)
    assert "postgres:***@127.0.0.1:1" in str(unreachable.value)
    assert s.store.is_connection_error(unreachable.value)  # a server down: try again


@pytest.mark.unsupported(sqlite="a file has no server sessions to set up")
def test_a_postgres_connection_is_autocommit_read_committed_whatever_the_servers_default(
    s: StoreCase,
) -> None:
    database = urlsplit(s.url).path.lstrip("/")
    s.execute(f"ALTER DATABASE {database} SET default_transaction_isolation = 'serializable'")
    timeout = "options=-c%20statement_timeout%3D4321"
    with (
        contextlib.closing(s.store.connect(s.url)) as plain,
        contextlib.closing(s.store.connect(f"{s.url}?{timeout}", application_name="x")) as own,
    ):
        for conn in (plain, own):
            assert conn.autocommit
            assert conn.execute("SHOW transaction_isolation").fetchone() == ("read committed",)
            conn.execute("BEGIN")
            assert conn.execute("SHOW transaction_isolation").fetchone() == ("read committed",)
            conn.execute("ROLLBACK")
        assert plain.execute("SHOW application_name").fetchone() == ("txqueue",)
        assert own.execute("SHOW application_name").fetchone() == ("x",)
        # The URL's own options are kept beside txqueue's.
        assert own.execute("SHOW statement_timeout").fetchone() == ("4321ms",)


@pytest.mark.unsupported(sqlite="a file has no pooler in front of it")
def test_through_a_pooler_a_postgres_connection_needs_read_committed_as_the_default(
    s: StoreCase,
) -> None:
    # ``?pgbouncer=true`` on a direct connection: the check is the same behind a pooler.
    database = urlsplit(s.url).path.lstrip("/")
    with contextlib.closing(s.store.connect(f"{s.url}?pgbouncer=true")) as pooled:
        assert pooled.prepare_threshold is None  # no prepared statements through a pooler
    s.execute(f"ALTER DATABASE {database} SET default_transaction_isolation = 'serializable'")
    with pytest.raises(StoreError) as refused:
        s.store.connect(f"{s.url}?pgbouncer=true")
    assert str(refused.value).startswith(
        f"{s.url}?pgbouncer=true has default_transaction_isolation 'serializable'; txqueue "
        "needs 'read committed', and through a pooler it cannot set that per session: "
        "ALTER ROLE"
    )


@pytest.mark.unsupported(postgres="a server is set up by its administrator")
def test_a_sqlite_connection_is_autocommit_in_wal_with_a_busy_timeout(s: StoreCase) -> None:
    assert s.conn.isolation_level is None
    assert s.conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert s.conn.execute("PRAGMA busy_timeout").fetchone() == (30000,)
    assert s.conn.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL


# --- is_closed, is_connection_error ----------------------------------------------------


def test_a_closed_connection_is_closed_and_its_errors_are_worth_retrying(s: StoreCase) -> None:
    assert not s.store.is_closed(s.conn)
    s.conn.close()
    assert s.store.is_closed(s.conn)
    with pytest.raises(StoreError, match=r"^dashboard: ") as failed:
        s.store.workers(s.conn)
    assert s.store.is_connection_error(failed.value)


@pytest.mark.unsupported(sqlite="a file has no server to drop the connection")
def test_a_connection_the_server_dropped_is_closed_and_its_errors_are_worth_retrying(
    s: StoreCase,
) -> None:
    (pid,) = s.conn.execute("SELECT pg_backend_pid()").fetchone()
    assert select(s, "SELECT pg_terminate_backend(%s, 10000)", (pid,)) == [(True,)]
    assert not s.store.is_closed(s.conn)  # not known until it is used
    with pytest.raises(StoreError) as failed:
        s.store.workers(s.conn)
    assert s.store.is_connection_error(failed.value)
    assert s.store.is_closed(s.conn)


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


def test_applying_the_schema_applies_every_migration_once(s: StoreCase, bare: Any) -> None:
    assert s.store.apply_schema(bare) == versions(s.kind)
    recorded = bare.execute("SELECT version FROM txqueue_migrations ORDER BY version")
    assert [r[0] for r in recorded.fetchall()] == versions(s.kind)
    assert s.store.apply_schema(bare) == []
    assert s.store.list_schedules(bare) == []  # the tables are there


def test_the_schema_applied_in_an_open_transaction_commits_or_rolls_back_with_it(
    s: StoreCase, bare: Any
) -> None:
    with pytest.raises(Boom), s.store.transaction(bare):
        assert s.store.apply_schema(bare) == versions(s.kind)
        raise Boom
    with pytest.raises(StoreError, match=MISSING_TABLES):
        s.store.list_schedules(bare)
    with s.store.transaction(bare):
        assert s.store.apply_schema(bare) == versions(s.kind)
    assert s.store.apply_schema(bare) == []


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
        with contextlib.closing(connect(s.url)) as other:
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


def test_a_sqlite_block_whose_commit_fails_rolls_back_and_frees_the_file(
    sqlite_url: str,
) -> None:
    """SQLite keeps a transaction whose COMMIT failed open, and with it the write lock."""
    with contextlib.closing(connect(sqlite_url, autocommit=True)) as app:
        app.execute("PRAGMA foreign_keys = ON")
        app.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        app.execute(
            "CREATE TABLE child (id INTEGER REFERENCES parent DEFERRABLE INITIALLY DEFERRED)"
        )
        with (
            pytest.raises(StoreError, match="commit a transaction: FOREIGN KEY constraint failed"),
            txqueue.transaction(app),
        ):
            app.execute("INSERT INTO child VALUES (1)")  # checked at the COMMIT
        assert not app.in_transaction


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
    calls = {
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


@pytest.mark.unsupported(sqlite="a file has no password and no pooler")
def test_a_postgres_error_never_shows_the_password_and_explains_a_poolers_refusal(
    s: StoreCase,
) -> None:
    url = other_database(s.url, "db", password="s3cret-pw")
    with pytest.raises(StoreError) as failed, s.errors("doing x", url):
        raise psycopg.OperationalError("FATAL: bad password s3cret-pw\nDETAIL: more")
    shown = url.replace("s3cret-pw", "***")
    assert str(failed.value) == f"doing x ({shown}): FATAL: bad password ***"
    with pytest.raises(StoreError) as failed, s.errors("doing x"):
        raise psycopg.OperationalError("unsupported startup parameter: options")
    assert str(failed.value) == (
        "doing x: unsupported startup parameter: options; through a transaction pooler, add "
        "?pgbouncer=true to the URL (not ignore_startup_parameters: txqueue would then prepare "
        "statements)"
    )
