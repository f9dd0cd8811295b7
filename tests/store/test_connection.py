"""How txqueue's own stores connect, apply their schema files and fail: what is about
PostgreSQL's server and SQLite's file themselves (passwords, poolers, session settings,
WAL, migrations of the packaged schema). What any store must do with its connections is
in the shipped suite (``txqueue.testing.conformance.suite.connection``)."""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

import txqueue
from tests.integration import cluster
from tests.integration.helpers import connect
from tests.store.kinds import other_database
from txqueue.errors import DatabaseLoginError, PermanentError, StoreError
from txqueue.store import PostgresStore
from txqueue.store.postgres import connection
from txqueue.store.sql import migrations, schema_text
from txqueue.testing.conformance import StoreCase, StoreKind, select
from txqueue.testing.conformance.suite.connection import MISSING_TABLES, Boom
from txqueue.testing.conformance.suite.upkeep import LEASE, lost, recover


def versions(kind: StoreKind) -> list[int]:
    """Every migration of the store's schema file, in order."""
    return [v for v, _ in migrations(schema_text(kind.schema))[1]]


# --- connect ---------------------------------------------------------------------------


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


@pytest.mark.unsupported(postgres="rows are locked one by one, not the whole database")
def test_a_sqlite_recovery_with_no_lease_run_out_does_not_wait_for_the_write_lock(
    s: StoreCase,
) -> None:
    """Every worker looks every 2 s: a look that takes the write lock for nothing makes
    every other writer wait for it, and waits for them."""
    task = lost(s)
    s.conn.execute("PRAGMA busy_timeout = 200")  # a wait for the lock fails fast
    with contextlib.closing(s.connect(autocommit=True)) as writer:
        writer.execute("BEGIN IMMEDIATE")  # another process's write in progress
        assert recover(s) == []  # no lease ran out: read, nothing locked
        s.advance(LEASE + 1)
        with pytest.raises(StoreError, match="locked"):
            recover(s)  # one ran out: the recovery waits for its turn to write
        writer.execute("ROLLBACK")
    assert [r.id for r in recover(s)] == [task.id]


# --- is_closed, is_connection_error ----------------------------------------------------


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


# --- errors ----------------------------------------------------------------------------


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
