"""Connections to PostgreSQL: opening them (READ COMMITTED, autocommit), telling a lost one
from a refused statement, transactions, and the schema's migrations."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol, TypeAlias, TypeVar
from urllib.parse import parse_qsl, urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow

from ...errors import DatabaseLoginError, SchemaError, StoreError
from ...redaction import redact, scrub, unsplit
from ..columns import all_fragments
from ..sql import Queries, migrations, schema_text

QUERIES = Queries(__package__ or "txqueue.store.postgres", fill=all_fragments("postgresql"))

PgConnection: TypeAlias = psycopg.Connection[TupleRow]
"""txqueue's own connection: autocommit, READ COMMITTED, rows as tuples."""


def as_uuid(value: Any) -> uuid.UUID:
    """An id as the driver returned it, as txqueue's callers get it: asyncpg returns its
    own UUID type, and an application's connection may load uuids as text (Django's)."""
    return value if type(value) is uuid.UUID else uuid.UUID(str(value))


@contextmanager
def errors(action: str, url: str | None = None) -> Iterator[None]:
    """Translate driver exceptions into StoreError, naming what failed and never a password."""
    try:
        yield
    except psycopg.errors.UndefinedTable as exc:
        raise SchemaError(
            f"{action}: the txqueue tables do not exist; run `txqueue init` first"
        ) from exc
    except psycopg.errors.UndefinedColumn as exc:
        raise SchemaError(
            f"{action}: the txqueue tables are older than this txqueue; run `txqueue init`"
        ) from exc
    except psycopg.Error as exc:
        detail = scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else "", url)
        if exc.sqlstate in _STANDBY_STATES:
            detail += (
                "; this server is read-only (a standby, or a primary demoted by a failover): "
                "list every server in the URL with target_session_attrs=read-write, and "
                "libpq connects to the primary"
            )
        elif "unsupported startup parameter" in detail:  # PgBouncer, refusing our ``options``
            detail += (
                f"; through a transaction pooler, add ?{POOLER_PARAMETER}=true to the URL "
                "(not ignore_startup_parameters: txqueue would then prepare statements)"
            )
        where = f" ({redact(url)})" if url else ""
        raise StoreError(f"{action}{where}: {detail or type(exc).__name__}") from exc


@contextmanager
def savepoint(conn: Caller) -> Iterator[None]:
    """A block whose failure the caller's transaction survives: a savepoint in it (never a
    transaction of its own, which psycopg would commit), or in autocommit a transaction."""
    if conn.autocommit:
        with conn.transaction():
            yield
        return
    conn.execute(QUERIES["savepoint"])
    try:
        yield
    except BaseException:
        conn.execute(QUERIES["rollback_to_savepoint"])
        raise
    conn.execute(QUERIES["release_savepoint"])


def retrying_moved(conn: Caller, run: Callable[[], Any]) -> list[Any]:
    """The rows of ``run()``, a statement locking pending or finished tasks, run again if a
    row had just moved to another slot as it came to lock it (docs/explanation/storage.md: SQLSTATE
    40001, "tuple to be locked was already moved to another partition"). In autocommit the
    statement is its own transaction, and no round trip is added."""
    for attempt in range(3):
        try:
            with nullcontext() if conn.autocommit else savepoint(conn):
                return list(run().fetchall())
        except psycopg.errors.SerializationFailure:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


T = TypeVar("T")


def again_if_moved(conn: Caller, block: Callable[[], T]) -> T:
    """``block()``, several statements in one savepoint (``savepoint``), run again from
    the start if a row it came to lock had just moved to another slot (as
    ``retrying_moved``; the savepoint undoes what the block had done)."""
    for attempt in range(3):
        try:
            with savepoint(conn):
                return block()
        except psycopg.errors.SerializationFailure:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


_READ_COMMITTED = "-c default_transaction_isolation=read\\ committed"
# A prepared statement is planned once, not at every call: left to choose, PostgreSQL plans
# the claim by id afresh every time (it guesses a one-id custom plan cheaper), and over the
# slots of the task table that planning took longer than the statement
# (docs/explanation/storage.md).
# A plan outlives the sizes it was made for, and a slot is often empty when it is made: no
# sequential scan, then, where an index serves, or the claims would read the whole current
# slot until the next plan. A statement that must still read a table whole (`txqueue status`)
# then looks costly enough to compile with JIT, tens of milliseconds no statement here earns
# back. tests/integration/test_plans.py checks the plans that run.
_PLANS = "-c plan_cache_mode=force_generic_plan -c enable_seqscan=off -c jit=off"
POOLER_PARAMETER = "pgbouncer"
_TRUE = ("true", "1", "yes", "on")
# Dead peers found within about a minute: a worker cut off from the database (a partition,
# a vanished load balancer) reconnects once the network heals instead of waiting minutes
# for the kernel to give up on a statement sent into the void.
_TCP = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # milliseconds a sent statement may go unacknowledged
}


def pooled(url: str) -> bool:
    """Whether the URL says it goes through a transaction-mode pooler (``?pgbouncer=true``)."""
    return any(
        key == POOLER_PARAMETER and value.lower() in _TRUE
        for key, value in parse_qsl(urlsplit(url).query)
    )


def connect_args(url: str, application_name: str) -> tuple[str, dict[str, Any]]:
    """How txqueue opens its own connections, sync or async: the URL for libpq (without
    txqueue's own parameter) and the connection's arguments.

    Through a transaction-mode pooler each transaction may run on another server session,
    so none is set up: no ``options`` at startup (PgBouncer refuses them; ``check_pooled``
    checks the server's default isolation instead) and no prepared statements (PgBouncer
    before 1.21 cannot route them).
    """
    parts = urlsplit(url)
    # The other parameters go to libpq exactly as written (no decoding and re-encoding).
    kept = [item for item in parts.query.split("&") if item.split("=")[0] != POOLER_PARAMETER]
    conninfo = unsplit(parts._replace(query="&".join(kept)))
    given = conninfo_to_dict(conninfo)
    args: dict[str, Any] = {
        "autocommit": True,
        "connect_timeout": 10,
        "application_name": application_name,
    }
    args.update({k: v for k, v in _TCP.items() if k not in given})
    if pooled(url):
        args["prepare_threshold"] = None
    else:  # the URL's own options come first
        args["options"] = f"{given.get('options') or ''} {_READ_COMMITTED} {_PLANS}".strip()
    return conninfo, args


def check_pooled(conn: PgConnection, url: str) -> None:
    """Behind a pooler txqueue cannot ask for READ COMMITTED per session, so the server's
    default must be it (PostgreSQL's own default)."""
    with errors("checking the isolation level", url):
        row = conn.execute(QUERIES["check_isolation"]).fetchone()
    if row is not None and row[0] != "read committed":
        raise StoreError(
            f"{redact(url)} has default_transaction_isolation {row[0]!r}; txqueue needs "
            "'read committed', and through a pooler it cannot set that per session: "
            "ALTER ROLE <txqueue's user> SET default_transaction_isolation = 'read committed'"
        )


# Refused for good: by the server (a wrong password or user, a database that does not
# exist), or by libpq (a server certificate that does not verify: another CA, another host
# name; a client certificate or key that cannot be used). A failed connect carries no
# SQLSTATE, only the message, the server's in its lc_messages. A refusal once the server
# had the password is told by libpq's flags in any language (``_refused_after_password``);
# the others by the English text below, and in another language taken for an outage.
_PERMANENT_STATES = ("28", "3D")
# Refused after the password, yet not for good: a per-role or per-database connection
# limit; a pooler whose server is down or full (PgBouncer speaks English only).
# And a server that is no primary yet or no more (a failover under way: a standby, one
# starting up or shutting down), or has only its reserved slots left.
_PASSING = re.compile(
    r"too many connections|no more connections allowed|try again later"
    r"|cannot connect to server|query_wait_timeout"
    r"|read-only|hot standby|in recovery|starting up|shutting down|reserved for"
)
# The server ended the session itself, an idle limit having run out: as gone as if lost.
_ENDED_STATES = ("25P03", "57P05")
# A server that cannot write: a standby (one that a URL without target_session_attrs
# reached, or a primary demoted and restarted as one). It may never become writable, and
# another host of the URL may be the primary: as good as lost, its connection is replaced.
_STANDBY_STATES = ("25006",)
_PERMANENT = re.compile(
    r"FATAL: .*(does not exist|authentication failed|no pg_hba\.conf entry)"
    r"|certificate verify failed|does not match host name|has group or world access"
    r"|could not (load|read) (private key|certificate|root certificate) file"
    r"|root certificate file .* does not exist"
)


def _refused_for_good(cause: psycopg.Error) -> bool:
    """A refusal no retry mends, told by its SQLSTATE or by the server's English words."""
    return (cause.sqlstate or "").startswith(_PERMANENT_STATES) or bool(
        _PERMANENT.search(str(cause))
    )


def _refused_after_password(cause: psycopg.Error) -> bool:
    """A connect the server refused once it had the password, or that it asked a password
    for and none was given: a wrong password, or no right to that database, or no such
    database. libpq says so in flags, whatever the language of the server's message; a
    failure before that point (too many clients, starting up, unreachable) leaves them
    unset."""
    pgconn = cause.pgconn
    return (
        pgconn is not None
        and not pgconn.server_version  # never connected: a failed connect, not a lost one
        and (pgconn.used_password or pgconn.needs_password)
    )


class Caller(Protocol):
    """The application's connection, as txqueue's statements on it use one: a psycopg
    ``Connection``, or another driver's wrapped to look like it (``adapters``)."""

    @property
    def autocommit(self) -> bool: ...
    def execute(self, query: Any, params: Any = ..., *, prepare: bool | None = ...) -> Any: ...
    def transaction(self) -> AbstractContextManager[Any]: ...


class Connection:
    """Opening txqueue's own connections, telling a lost one from a refusal, transactions
    on a caller's connection, and the schema's migrations."""

    def connect(
        self, url: str, *, application_name: str = "txqueue", create: bool = False
    ) -> PgConnection:
        """An autocommit connection for txqueue's own statements (``create``: for SQLite's
        sake; a PostgreSQL database is created by its administrator).

        READ COMMITTED whatever the server's default: the commit check reads a transaction's
        status, then looks for its row in a later statement, which must see the commit; and
        under REPEATABLE READ claims that meet would fail with serialization errors.
        """
        conninfo, args = connect_args(url, application_name)
        try:
            with errors("cannot connect to PostgreSQL", url):
                conn = psycopg.connect(conninfo, **args)
        except StoreError as exc:
            cause = exc.__cause__
            if (
                isinstance(cause, psycopg.Error)
                and not self.is_connection_error(exc)
                and _refused_for_good(cause)
            ):
                raise DatabaseLoginError(str(exc)) from cause
            raise  # lost, or refused by libpq's flags alone: maybe not for good
        conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        if pooled(url):
            try:
                check_pooled(conn, url)
            except StoreError:
                conn.close()
                raise
        return conn

    def is_connection_error(self, exc: BaseException) -> bool:
        """True when a StoreError came from a lost or refused connection (worth retrying),
        not from a server that answered no (bad credentials, no such database)."""
        cause = exc.__cause__
        if isinstance(cause, psycopg.Error) and cause.sqlstate in _ENDED_STATES + _STANDBY_STATES:
            return True
        if not isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError):
            return False
        if _refused_after_password(cause) and _PASSING.search(str(cause)) is None:
            return False
        return not _refused_for_good(cause)

    def is_closed(self, conn: PgConnection) -> bool:
        return conn.closed or conn.broken

    def transaction(self, conn: Caller) -> AbstractContextManager[object]:
        """A transaction on the caller's connection; a savepoint inside one already open."""
        return conn.transaction()

    def apply_schema(self, conn: PgConnection) -> list[int]:
        """Apply the migrations not yet recorded; returns the versions applied now.

        Each in a transaction of its own (a savepoint inside the caller's), so that no
        migration's locks are held while the next one waits for its tables: workers of the
        previous release take those tables in their own order (a schedule's row, then its
        slot's task), and PostgreSQL would end one side as a deadlock."""
        preamble, numbered = migrations(schema_text("schema.sql"))
        applied: list[int] = []
        with errors("applying schema.sql"):
            with conn.transaction():
                conn.execute(QUERIES["lock_migrations"])
                conn.execute(preamble.encode())
            for version, body in numbered:
                with conn.transaction():
                    conn.execute(QUERIES["lock_migrations"])
                    # Read again under the lock: another init may have applied it meanwhile.
                    if version in {r[0] for r in conn.execute(QUERIES["applied_migrations"])}:
                        continue
                    conn.execute(body.encode())
                    conn.execute(QUERIES["record_migration"], (version,))
                applied.append(version)
        return applied
