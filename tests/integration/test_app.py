"""Two ``txqueue.App`` configurations in one process share nothing: each runs its own tasks
from its own database, its wake-ups reach only its own workers (through RabbitMQ or in
process), its queues are declared with its own type, and on SQLite its clock moves alone."""

from __future__ import annotations

import asyncio
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

import txqueue
from tests.partition import RABBITMQ
from txqueue import App, Task, config
from txqueue.errors import ConfigError
from txqueue.outbox import wakeup
from txqueue.outbox.wakeup import queue_name
from txqueue.store import SQLITE
from txqueue.store.postgres.databases import create_database, drop_database

from .helpers import connect, declared_as, rows, running, wait_until

HOUR = 3600.0


def sqlite_db(tmp_path: Path, name: str) -> str:
    """A SQLite database of its own, as `txqueue init` makes it."""
    url = f"sqlite:///{tmp_path / name}"
    with closing(SQLITE.connect(url, create=True)) as conn:
        SQLITE.apply_schema(conn)
    return url


def recording(queue: str) -> tuple[txqueue.Registry, list[Any]]:
    registry = txqueue.Registry()
    ran: list[Any] = []
    registry.task("rec", queue=queue)(lambda payload: ran.append(payload))
    return registry, ran


def enqueue_each(app: App, db_url: str, queue: str, payloads: list[Any]) -> list[Any]:
    """One transaction per task, so that each sends a wake-up of its own."""
    ids = []
    with closing(connect(db_url)) as c:
        for payload in payloads:
            with txqueue.transaction(c):
                ids.append(app.enqueue(c, Task("rec", payload, queue=queue)))
    return ids


def astray(worker: txqueue.Worker, waits: bool = True) -> dict[str, int]:
    """The verdicts a worker gives a wake-up for a task its database has not got (another
    App's): given up on, or (``waits``) waited for; none is expected. A wake-up sent before
    its commit is waited for too: where that may happen, only its giving up counts."""
    verdicts = ("dropped_gone", "dropped_rolled_back", "gave_up_waiting")
    verdicts += ("waited_for_commit",) if waits else ()
    return {k: v for k, v in worker.stats.items() if v and k in verdicts}


def run_one(app: App, db_url: str, queue: str, ran: list[Any], payload: str) -> None:
    """Enqueue a task and wait for it to run: its worker, which subscribes to its App's
    wake-ups before it first looks for tasks, now listens."""
    enqueue_each(app, db_url, queue, [payload])
    wait_until(lambda: payload in ran, timeout=5)


def test_two_sqlite_apps_send_their_wakeups_to_their_own_subscribers(
    tmp_path: Path, queue: str
) -> None:
    """Same queue, no broker: each App's wake-ups go to its own in-process subscribers, at
    the commit of ``txqueue.transaction``, and none to the module-level configuration's."""
    url_a, url_b = sqlite_db(tmp_path, "a.db"), sqlite_db(tmp_path, "b.db")
    got_a: list[wakeup.Wakeup] = []
    got_b: list[wakeup.Wakeup] = []
    got_default: list[wakeup.Wakeup] = []
    a = App(database_url=url_a, amqp_url=None)
    b = App(database_url=url_b, amqp_url=None)
    a.delivery.local.subscribe([queue], got_a.append)
    b.delivery.local.subscribe([queue], got_b.append)
    txqueue.configure(amqp_url=None)
    wakeup.subscribe_local([queue], got_default.append)
    try:
        with closing(connect(url_a)) as ca, closing(connect(url_b)) as cb:
            with txqueue.transaction(ca), txqueue.transaction(cb):
                ids_a = a.enqueue_many(ca, [Task("t", i, queue=queue) for i in range(3)])
                ids_b = [b.enqueue(cb, Task("t", queue=queue))]
                assert got_a == got_b == []  # held for the commit
            ids_a.append(a.enqueue(ca, Task("t", queue=queue)))  # sent at once
            ca.commit()
    finally:
        wakeup.unsubscribe_local(got_default.append)
        txqueue.configure()
    assert [w.id for w in got_a] == ids_a
    assert [w.id for w in got_b] == ids_b
    assert got_default == []


def test_two_sqlite_apps_workers_run_only_their_own_tasks(tmp_path: Path, queue: str) -> None:
    url_a, url_b = sqlite_db(tmp_path, "a.db"), sqlite_db(tmp_path, "b.db")
    registry_a, ran_a = recording(queue)
    registry_b, ran_b = recording(queue)
    with (
        App(registry_a, database_url=url_a, amqp_url=None) as a,
        App(registry_b, database_url=url_b, amqp_url=None) as b,
    ):
        worker_a, worker_b = a.worker(poll_interval=60), b.worker(poll_interval=60)
        with running(worker_a), running(worker_b):
            run_one(a, url_a, queue, ran_a, "a-first")
            run_one(b, url_b, queue, ran_b, "b-first")
            # From here on a 60 s poll: only their own App's wake-ups start these at once.
            enqueue_each(a, url_a, queue, ["a0", "a1", "a2"])
            enqueue_each(b, url_b, queue, ["b0", "b1"])
            wait_until(lambda: len(ran_a) == 4 and len(ran_b) == 3, timeout=5)
    assert sorted(ran_a) == ["a-first", "a0", "a1", "a2"]
    assert sorted(ran_b) == ["b-first", "b0", "b1"]
    assert astray(worker_a) == astray(worker_b) == {}
    assert worker_a.stats["woken"] >= 3 and worker_b.stats["woken"] >= 2


@RABBITMQ
def test_an_app_on_rabbitmq_and_one_in_process_keep_their_wakeups_apart(
    pg_url: str, sqlite_url: str, services: tuple[str, str], queue: str
) -> None:
    """One App on PostgreSQL woken through RabbitMQ, one on SQLite woken in process, and
    the module-level configuration without a broker: same queue name, no crossing."""
    registry_pg, ran_pg = recording(queue)
    registry_lite, ran_lite = recording(queue)
    got_default: list[wakeup.Wakeup] = []
    txqueue.configure(amqp_url=None)
    wakeup.subscribe_local([queue], got_default.append)
    try:
        with (
            App(registry_pg, database_url=pg_url, amqp_url=services[1]) as on_pg,
            App(registry_lite, database_url=sqlite_url, amqp_url=None) as on_sqlite,
        ):
            assert on_pg.amqp_url == services[1] and on_sqlite.amqp_url is None
            # A SQLite wake-up (no transaction id) reaching it would be waited for, then
            # given up on after commit_wait: the settle below lets that happen.
            worker_pg = on_pg.worker(poll_interval=60, commit_wait=1.0)
            worker_lite = on_sqlite.worker(poll_interval=60)
            with running(worker_pg), running(worker_lite):
                run_one(on_pg, pg_url, queue, ran_pg, "pg-first")
                run_one(on_sqlite, sqlite_url, queue, ran_lite, "lite-first")
                enqueue_each(on_pg, pg_url, queue, ["pg0", "pg1"])
                enqueue_each(on_sqlite, sqlite_url, queue, ["lite0", "lite1"])
                wait_until(lambda: len(ran_pg) == 3 and len(ran_lite) == 3, timeout=10)
                assert on_pg.flush(5)
                time.sleep(1.5)
    finally:
        wakeup.unsubscribe_local(got_default.append)
        txqueue.configure()
    assert sorted(ran_pg) == ["pg-first", "pg0", "pg1"]
    assert sorted(ran_lite) == ["lite-first", "lite0", "lite1"]
    # Its own wake-up may come before the commit it names (under load): waited for, fine.
    assert astray(worker_pg, waits=False) == astray(worker_lite) == {}
    assert worker_pg.stats["woken"] >= 2 and worker_lite.stats["woken"] >= 2
    assert worker_pg.state().broker_up is not None  # it consumed RabbitMQ
    assert worker_lite.state().broker_up is None  # it had no broker at all
    assert got_default == []


def test_each_sqlite_apps_clock_moves_alone(tmp_path: Path) -> None:
    """A delayed task becomes ripe in the App whose clock moved, and only there; the
    module-level store's clock stays put."""
    url_a, url_b = sqlite_db(tmp_path, "a.db"), sqlite_db(tmp_path, "b.db")
    registry, ran = recording("q")
    a = App(registry, database_url=url_a, amqp_url=None)
    b = App(registry, database_url=url_b, amqp_url=None)
    assert a.clock is not None and b.clock is not None
    for app, url in ((a, url_a), (b, url_b)):
        with closing(connect(url)) as c, txqueue.transaction(c):
            app.enqueue(c, Task("rec", url, queue="q", delay=HOUR))
    a.clock.skew += 2 * HOUR
    a.worker().run(burst=True)
    b.worker().run(burst=True)
    assert ran == [url_a]
    assert [r["state"] for r in rows(url_b)] == ["pending"]
    assert b.clock.skew == 0.0 and SQLITE.clock.skew == 0.0

    # Its enqueues, sync and async, and its cleaner go by the same moved clock.
    with closing(connect(url_a)) as c, txqueue.transaction(c):
        later = a.enqueue(c, Task("rec", queue="q"))
    (row,) = rows(url_a, "id = %s", (str(later),))
    assert row["created_at"].timestamp() > time.time() + HOUR

    async def enqueue_async() -> Any:
        import aiosqlite

        path = url_a.removeprefix("sqlite:///")
        async with aiosqlite.connect(path) as c, txqueue.transaction_async(c):
            return await a.enqueue_async(c, Task("rec", queue="q"))

    awaited = asyncio.run(enqueue_async())
    (row,) = rows(url_a, "id = %s", (str(awaited),))
    assert row["created_at"].timestamp() > time.time() + HOUR

    a.worker().run(burst=True)
    a.clock.skew += 2 * HOUR  # past the hour of retention below
    assert a.cleaner(retain=HOUR).run_once().pruned == 3
    b.clock.skew += 2 * HOUR  # its task is ripe now, not finished: nothing to prune
    assert b.cleaner(retain=HOUR).run_once().pruned == 0


@RABBITMQ
def test_apps_declare_queues_of_their_own_type_without_reading_the_environment(
    pg_url: str, services: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    amqp_url = services[1]
    quorum_queue, classic_queue = (f"t_{uuid.uuid4().hex[:10]}" for _ in range(2))
    quorum = App(database_url=pg_url, amqp_url=amqp_url, queue_type="quorum")
    classic = App(database_url=pg_url, amqp_url=amqp_url, queue_type="classic")
    # Read once: from here on a bad value in the environment changes nothing.
    monkeypatch.setenv(config.QUEUE_TYPE_ENV, "stream")
    try:
        with closing(connect(pg_url)) as c, txqueue.transaction(c):
            quorum.enqueue(c, Task("t", queue=quorum_queue))
            classic.enqueue_many(c, [Task("t", queue=classic_queue)] * 2)
        assert quorum.flush(10) and classic.flush(10)
        assert declared_as(amqp_url, quorum_queue, {"x-queue-type": "quorum"})
        assert declared_as(amqp_url, classic_queue, {})
        assert not declared_as(amqp_url, classic_queue, {"x-queue-type": "quorum"})
    finally:
        quorum.close()
        classic.close()
        with closing(pika.BlockingConnection(pika.URLParameters(amqp_url))) as conn:
            for name in (quorum_queue, classic_queue):
                conn.channel().queue_delete(queue_name(name))


def test_a_connection_to_another_kind_of_database_is_refused(pg_url: str, sqlite_url: str) -> None:
    app = App(database_url=sqlite_url, amqp_url=None)
    with closing(connect(pg_url)) as c:
        with pytest.raises(ConfigError, match="PostgreSQL connection, and database_url"):
            app.enqueue(c, Task("t"))
        c.rollback()
    assert rows(pg_url) == []


def test_init_creates_and_upgrades_the_schema_from_python(
    tmp_path: Path, services: tuple[str, str]
) -> None:
    fresh = App(database_url=f"sqlite:///{tmp_path / 'new.db'}", amqp_url=None)
    applied = fresh.init()  # creates the file, too
    assert applied and applied == sorted(applied)
    assert fresh.init() == []  # up to date: nothing to do

    name = f"txqueue_init_{uuid.uuid4().hex[:10]}"
    server = services[0]
    create_database(server, name)
    try:
        # The application's own SQLAlchemy URL, driver and all.
        url = server.replace("postgresql://", "postgresql+asyncpg://").rsplit("/", 1)[0]
        app = App(database_url=f"{url}/{name}", amqp_url=None)
        migrations = app.init()
        assert migrations and migrations == sorted(migrations)
        assert app.init() == []
        with closing(connect(app.database_url)) as c, txqueue.transaction(c):
            task_id = app.enqueue(c, Task("t", {}))
        assert [r["id"] for r in rows(app.database_url)] == [task_id]
    finally:
        drop_database(server, name)


def test_a_registry_bound_to_an_app_enqueues_and_waits_through_it(tmp_path: Path) -> None:
    """``registry.bind(app)``: its typed tasks' enqueues take the App's store, clock and
    wake-ups, not the module-level ones; ``options(app=…)`` picks another App for one."""
    url_a, url_b = sqlite_db(tmp_path, "a.db"), sqlite_db(tmp_path, "b.db")
    registry = txqueue.Registry()

    @registry.task(queue="greet")
    def greet(site: str) -> str:
        return f"hello {site}"

    a = App(registry, database_url=url_a, amqp_url=None)
    b = App(registry, database_url=url_b, amqp_url=None)
    assert a.clock is not None
    a.clock.skew += HOUR
    got_a: list[wakeup.Wakeup] = []
    got_b: list[wakeup.Wakeup] = []
    got_default: list[wakeup.Wakeup] = []
    a.delivery.local.subscribe(["greet"], got_a.append)
    b.delivery.local.subscribe(["greet"], got_b.append)
    txqueue.configure(amqp_url=None)
    wakeup.subscribe_local(["greet"], got_default.append)
    try:
        registry.bind(a)
        with closing(connect(url_a)) as ca, closing(connect(url_b)) as cb:
            with txqueue.transaction(ca), txqueue.transaction(cb):
                on_a = greet.enqueue(ca, "a")
                on_b = greet.options(app=b, priority=1).enqueue(cb, "b")
            assert [w.id for w in got_a] == [on_a] and [w.id for w in got_b] == [on_b]
            assert got_default == []
            registry.bind(None)
            with txqueue.transaction(cb):
                default = greet.enqueue(cb, "default")
        assert [w.id for w in got_default] == [default]
    finally:
        wakeup.unsubscribe_local(got_default.append)
        txqueue.configure()
    (row,) = rows(url_a)
    assert row["created_at"].timestamp() > time.time() + HOUR / 2  # a's clock
    assert all(r["created_at"].timestamp() < time.time() + 60 for r in rows(url_b))

    registry.bind(a)
    a.worker().run(burst=True)
    assert greet.wait(url_a, on_a, timeout=5) == "hello a"
    with pytest.raises(txqueue.InvalidTypeError, match=r"app: must be a txqueue\.App"):
        registry.bind(url_a)  # type: ignore[arg-type]
    with pytest.raises(txqueue.InvalidTypeError, match=r"app: must be a txqueue\.App"):
        greet.options(app=url_a)  # type: ignore[arg-type]


def test_an_apps_management_calls_go_through_its_store_and_wakeups(tmp_path: Path) -> None:
    """Retry, cancel, the queues' flow control, the reads and ``wait`` of an App take its
    own store (here, a clock an hour ahead) and wake its own workers."""
    url = sqlite_db(tmp_path, "a.db")
    registry = txqueue.Registry()
    registry.task("boom", queue="q", max_attempts=1)(lambda: 1 / 0)
    app = App(registry, database_url=url, amqp_url=None)
    assert app.clock is not None
    app.clock.skew += HOUR
    with closing(connect(url)) as c, txqueue.transaction(c):
        tid = app.enqueue(c, Task("boom", queue="q"))
    app.worker().run(burst=True)
    got: list[wakeup.Wakeup] = []
    got_default: list[wakeup.Wakeup] = []
    app.delivery.local.subscribe(["q"], got.append)
    txqueue.configure(amqp_url=None)
    wakeup.subscribe_local(["q"], got_default.append)
    try:
        with closing(connect(url)) as c:
            assert app.get_task(c, tid).state == "failed"
            assert app.retry_failed(c, queue="q", by="ops") == 1
            assert app.pause_queue(c, "q").paused
            assert app.cancel(c, tid, by="ops") == "cancelled"
            app.retry(c, tid, by="ops")
            with txqueue.transaction(c):
                assert not app.resume_queue(c, "q").paused
                assert app.limit_queue(c, "q", concurrency=2).concurrency == 2
            assert [q.queue for q in app.list_queues(c)] == ["q"]
            assert app.get_queue(c, "q").concurrency == 2
            assert [t.id for t in app.list_tasks(c, state="pending")] == [tid]
            moves = [(e.event.move, e.event.by) for e in app.history(c, by="ops")]
            assert moves == [("retry", "ops"), ("cancel", "ops"), ("retry", "ops")]
            c.commit()
    finally:
        wakeup.unsubscribe_local(got_default.append)
        txqueue.configure()
    assert [w.id for w in got] == [tid, tid, tid]  # two retries, then the resumed queue
    assert got_default == []
    (row,) = rows(url)
    assert row["run_at"].timestamp() > time.time() + HOUR / 2  # retried by the App's clock

    app.worker().run(burst=True)
    assert app.wait(tid, timeout=5).state == "failed"
    with closing(connect(url)) as c:
        assert app.wait(tid, timeout=5, conn=c).attempts == 2

    async def read() -> Any:
        import aiosqlite

        async with aiosqlite.connect(url.removeprefix("sqlite:///")) as c:
            return (await app.get_task_async(c, tid)).state, await app.wait_async(tid, 5)

    state, info = asyncio.run(read())
    assert state == "failed" and info.id == tid
