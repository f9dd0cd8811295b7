"""Helpers for integration tests: a worker on a thread, waiting, and reading and writing rows
in either store."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import socket
import sqlite3
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pika
import pika.exceptions
import psycopg

import txqueue
from txqueue.outbox import wakeup
from txqueue.store.postgres.connection import connect_args
from txqueue.store.sqlite import path as sqlite_path


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0, every: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(every)


W = TypeVar("W", txqueue.Worker, txqueue.Fleet)


@contextlib.contextmanager
def running(worker: W) -> Iterator[W]:
    """Run ``worker`` on a thread until the block ends; re-raise what the worker raised."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as exc:  # handed to the test thread
            failure.append(exc)

    thread = threading.Thread(target=target, name="test-worker")
    thread.start()
    try:
        assert worker.wait_consuming(10), "worker did not start consuming"
        yield worker
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive(), "worker did not stop"
    if failure:
        raise failure[0]


@contextlib.contextmanager
def held_open(db_url: str, application: str = "txqueue-test-holder") -> Iterator[int]:
    """A session left idle in a transaction that wrote (has an xid), as a forgotten
    ``BEGIN`` leaves one: it holds the vacuum horizon back until the block ends, which
    rolls it back. Yields its pid."""
    with psycopg.connect(db_url, application_name=application) as c:
        row = c.execute("SELECT pg_backend_pid(), pg_current_xact_id()").fetchone()
        assert row is not None
        try:
            yield int(row[0])
        finally:
            c.rollback()


def connect(db_url: str, *, autocommit: bool = False) -> Any:
    """An application connection to either store: by default in a transaction that the
    caller commits, as an application's is."""
    if db_url.startswith("sqlite:"):
        isolation = None if autocommit else ""
        return sqlite3.connect(sqlite_path(db_url), timeout=30, isolation_level=isolation)
    return psycopg.connect(db_url, autocommit=autocommit)


def own_connection(db_url: str) -> psycopg.Connection[Any]:
    """A connection set up as txqueue's own are (generic plans, no sequential scan where an
    index serves), but in a transaction the test rolls back."""
    conninfo, args = connect_args(db_url, "txqueue-test")
    return psycopg.connect(conninfo, **{**args, "autocommit": False})


def plan_as_run(conn: psycopg.Connection[Any], query: str, params: Any) -> str:
    """The JSON plan ``query`` runs with on ``conn`` (from ``own_connection``) once prepared,
    as a worker runs it: the generic plan, made for no parameter's value. It runs the
    statement once to prepare it."""
    conn.execute(query, params, prepare=True)
    prepared = "SELECT name, cardinality(parameter_types) FROM pg_prepared_statements"
    row = conn.execute(prepared + " ORDER BY prepare_time DESC LIMIT 1", prepare=False).fetchone()
    assert row is not None
    name, count = row
    nulls = ", ".join(["NULL"] * count)
    sql = f"EXPLAIN (FORMAT JSON) EXECUTE {name} ({nulls})"
    plan = conn.execute(sql, prepare=False).fetchone()
    assert plan is not None
    return json.dumps(plan[0])


def tasks_read_whole(plan: str) -> list[str]:
    """The parts of the task table a JSON plan reads whole."""
    scanned = re.findall(r'"Node Type": "Seq Scan", [^{}]*"Relation Name": "(\w+)"', plan)
    return [name for name in scanned if name.startswith("txqueue_tasks")]


def enqueue_named(db_url: str, name: str, queue: str, **payload: Any) -> uuid.UUID:
    """Task ``name`` with ``payload`` as its arguments, committed on ``queue``; its id."""
    with contextlib.closing(connect(db_url)) as c, txqueue.transaction(c):
        return txqueue.enqueue(c, txqueue.Task(name, payload, queue=queue))


def task_info(db_url: str, task_id: uuid.UUID) -> txqueue.TaskInfo:
    with contextlib.closing(connect(db_url)) as c:
        return txqueue.get_task(c, task_id)


def execute(db_url: str, sql: str, params: tuple[Any, ...] = ()) -> int:
    """Run one statement as its own transaction, written with %s placeholders; the row count."""
    with contextlib.closing(connect(db_url)) as c:
        if isinstance(c, sqlite3.Connection):
            sql = sql.replace("%s", "?")
        n = c.execute(sql, params).rowcount
        c.commit()
    return int(n)


def drop_schema(db_url: str) -> None:
    """Leave the database as if ``txqueue init`` had never run in it."""
    tables = "txqueue_tasks txqueue_workers txqueue_schedules txqueue_leaders txqueue_migrations"
    tables += " txqueue_queues txqueue_starts txqueue_workflows txqueue_waits txqueue_signals"
    if not db_url.startswith("sqlite:"):
        tables += " txqueue_unique_keys txqueue_slots"
    for table in tables.split():
        execute(db_url, f"DROP TABLE IF EXISTS {table}")
    if not db_url.startswith("sqlite:"):
        execute(db_url, "DROP FUNCTION txqueue_current_slot(); DROP SEQUENCE txqueue_slot")
        execute(
            db_url,
            "DROP FUNCTION txqueue_room(text, integer, boolean), "
            "txqueue_key_rooms(text[], text[], integer[], float8[], integer[]), "
            "txqueue_rate_room(text, integer, float8, integer, timestamptz), "
            "txqueue_lock_step(uuid, uuid), txqueue_lock_steps(uuid[], uuid[]), "
            "txqueue_enqueue(text, jsonb, text, integer, timestamptz, interval, text, text, "
            "integer, double precision, boolean, interval, timestamptz, double precision), "
            "txqueue_uuid7(), txqueue_lock_signal(text), txqueue_signalled(text[]), "
            "txqueue_signal(text, jsonb)",
        )


def ago(db_url: str, seconds: float) -> str:
    """SQL for the time ``seconds`` before now, in the store's own representation."""
    if db_url.startswith("sqlite:"):
        return f"(unixepoch() - {float(seconds)})"
    return f"(now() - make_interval(secs => {float(seconds)}))"


_JSON = ("payload", "result", "errors", "on_lease_expired", "events", "parents", "inputs")
_TIMES = (
    "run_at",
    "start_time",
    "expires_at",
    "finished_at",
    "created_at",
    "updated_at",
    "notified_at",
    "start_by",
)


def _normal(row: dict[str, Any]) -> dict[str, Any]:
    """A SQLite row with PostgreSQL's Python types, so one assertion fits both stores."""
    row["id"] = uuid.UUID(row["id"])
    if row["workflow_id"] is not None:
        row["workflow_id"] = uuid.UUID(row["workflow_id"])
    for key in _JSON:
        row[key] = None if row[key] is None else json.loads(row[key])
    for key in _TIMES:
        row[key] = None if row[key] is None else datetime.fromtimestamp(row[key], UTC)
    row["cancel_requested"] = bool(row["cancel_requested"])
    return row


def rows(db_url: str, where: str = "1 = 1", params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    sql = f"SELECT * FROM txqueue_tasks WHERE {where} ORDER BY created_at, id"
    if db_url.startswith("sqlite:"):
        with contextlib.closing(connect(db_url)) as c:
            c.row_factory = sqlite3.Row
            return [_normal(dict(r)) for r in c.execute(sql.replace("%s", "?"), params)]
    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as c:
        found = c.execute(sql, params or None).fetchall()
    for row in found:
        # Where PostgreSQL keeps the row, not the task's (docs/explanation/storage.md).
        del row["slot"]
    return found


def count(db_url: str, where: str = "1 = 1") -> int:
    """Counted by the database: tests poll this while thousands of rows change."""
    with contextlib.closing(connect(db_url)) as c:
        row = c.execute(f"SELECT count(*) FROM txqueue_tasks WHERE {where}").fetchone()
    return int(row[0])


def http_get(port: int, path: str) -> tuple[int, str]:
    """GET a path on 127.0.0.1:``port``: (status, body), error statuses included."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus scrape: (name, labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    scrape: dict[tuple[str, frozenset[tuple[str, str]]], float], metric: str, **labels: str
) -> float:
    return scrape.get((metric, frozenset(labels.items())), 0.0)


# Each xdist worker (gw0, gw1, ...) hands out ports from a block of its own, below the
# kernel's ephemeral range: a port the kernel picked for one process could be picked again
# for another worker's client connection before the first worker's server binds it.
_BLOCK = 2000
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_next_port = itertools.cycle(range(20000 + _BLOCK * _WORKER, 20000 + _BLOCK * (_WORKER + 1)))


def free_port() -> int:
    """A loopback port nothing listens on now, of this test process's own block."""
    while True:
        port = next(_next_port)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def consumers(amqp_url: str, queue: str) -> int:
    """How many consumers RabbitMQ counts on ``queue``'s wake-up queue (0: not declared)."""
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        ok = conn.channel().queue_declare(wakeup.queue_name(queue), passive=True)
        return int(ok.method.consumer_count)
    except pika.exceptions.ChannelClosedByBroker:
        return 0
    finally:
        conn.close()


def declared_as(amqp_url: str, queue: str, arguments: dict[str, str]) -> bool:
    """Whether RabbitMQ accepts redeclaring the queue with these arguments (it refuses a
    declaration whose x-queue-type differs from the queue's)."""
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        conn.channel().queue_declare(wakeup.queue_name(queue), durable=True, arguments=arguments)
        return True
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code == 406, exc
        return False
    finally:
        if conn.is_open:
            conn.close()


def children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (Linux's /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.add(int(entry.name))
    return found
