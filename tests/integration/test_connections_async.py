"""The enqueue contract over every kind of asyncio connection (``kinds.ASYNC_KINDS``): as
``test_connections``, with ``enqueue_async``, ``enqueue_many_async`` and
``transaction_async``; task management with ``retry_async`` and the others."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from collections.abc import Awaitable, Callable
from contextlib import closing
from typing import Any

import pytest

import txqueue
from txqueue import Task
from txqueue.core.ids import uuid7

from .helpers import connect, count, execute, rows, sqlite_path
from .kinds import (
    ASYNC_KINDS,
    PARCEL,
    STORED,
    AsyncApp,
    Parcel,
    Woken,
    check_diamond,
    check_forked,
    check_unique_and_delayed,
    diamond,
    forked,
    kind_db,
    open_async_kind,
    unique_and_delayed,
)

Body = Callable[[AsyncApp], Awaitable[None]]


db = kind_db(ASYNC_KINDS)


@pytest.fixture
def url(db: tuple[str, str]) -> str:
    """The kind's database, whichever its store."""
    return db[1]


@pytest.fixture
def run(db: tuple[str, str]) -> Callable[[Body], None]:
    """Run a test body on a fresh connection of the kind, in its own event loop."""

    def go(body: Body) -> None:
        async def main() -> None:
            async with open_async_kind(*db) as app:
                await body(app)

        asyncio.run(main())

    return go


def test_a_committed_task_wakes_a_worker_after_the_commit_and_runs(
    run: Callable[[Body], None], url: str, queue: str, woken: Woken
) -> None:
    ids: list[Any] = []

    async def body(a: AsyncApp) -> None:
        async with a.atomic():
            ids.append(await txqueue.enqueue_async(a.conn, Task("send", {"n": 7}, queue=queue)))
            assert count(url) == 0
            if a.waits_for_commit or woken.notify:
                assert woken.heard(wait=0.1) == []

    run(body)
    assert woken.heard() == [queue] and len(ids) == 1
    ran: list[Any] = []
    registry = txqueue.Registry()
    registry.task("send", queue=queue)(ran.append)
    txqueue.Worker(registry, database_url=url, amqp_url=None).run(burst=True)
    assert ran == [{"n": 7}]


def test_a_rolled_back_task_leaves_no_row(
    run: Callable[[Body], None], url: str, queue: str, woken: Woken
) -> None:
    async def body(a: AsyncApp) -> None:
        with pytest.raises(ZeroDivisionError):
            async with a.atomic():
                await txqueue.enqueue_async(a.conn, Task("send", queue=queue))
                await txqueue.enqueue_many_async(a.conn, [Task("a", queue=queue)] * 2)
                1 / 0  # noqa: B018 - the application's transaction fails
        if a.waits_for_commit or woken.notify:
            assert woken.heard(wait=0.2) == []

    run(body)
    assert count(url) == 0


def test_a_workflow_is_written_whole_on_commit_and_nothing_on_rollback(
    run: Callable[[Body], None], url: str, queue: str, woken: Woken
) -> None:
    flows = [diamond(queue), diamond(queue)]
    sent_before_commit: list[bool] = []

    async def body(a: AsyncApp) -> None:
        with pytest.raises(ZeroDivisionError):
            async with a.atomic():
                await txqueue.enqueue_workflow_async(a.conn, flows[0][0])
                1 / 0  # noqa: B018 - the application's transaction fails
        assert count(url) == 0
        async with a.atomic():
            assert await txqueue.enqueue_workflow_async(a.conn, flows[1][0]) == flows[1][0].id
            assert count(url) == 0
        async with a.atomic():
            info = await txqueue.get_workflow_async(a.conn, flows[1][0].id)
            listed = await txqueue.list_workflows_async(a.conn, name="diamond")
        assert (info.name, info.state, len(info.steps)) == ("diamond", "running", 4)
        assert [(w.id, w.state, w.steps["waiting"]) for w in listed] == [
            (flows[1][0].id, "running", 3)
        ]
        sent_before_commit.append(not (a.waits_for_commit or woken.notify))

    run(body)
    heard = woken.heard()
    check_diamond(url, flows[1][1], heard[1:] if sent_before_commit[0] else heard)


def test_a_step_cancelled_by_hand_ends_or_readies_its_children_in_its_transaction(
    run: Callable[[Body], None], url: str, queue: str, woken: Woken
) -> None:
    flow, steps = forked(queue)

    async def body(a: AsyncApp) -> None:
        async with a.atomic():
            await txqueue.enqueue_workflow_async(a.conn, flow)
        assert woken.heard() == [queue]  # its first step
        async with a.atomic():
            assert await txqueue.cancel_async(a.conn, steps[0].id, by="ops") == "cancelled"

    run(body)
    check_forked(url, steps, woken.heard())

    async def rest(a: AsyncApp) -> None:
        async with a.atomic():  # what is left of it: the step readied
            assert await txqueue.cancel_workflow_async(a.conn, flow.id, by="ops") == 1

    run(rest)
    assert {r["state"] for r in rows(url)} == {"cancelled"}


def test_bad_input_raises_before_writing_and_the_transaction_goes_on(
    run: Callable[[Body], None], url: str, queue: str
) -> None:
    async def body(a: AsyncApp) -> None:
        async with a.atomic():
            with pytest.raises(txqueue.InvalidTypeError, match="task"):
                await txqueue.enqueue_async(a.conn, "send")  # type: ignore[arg-type]
            with pytest.raises(txqueue.InvalidTypeError, match=r"tasks\[0\]"):
                await txqueue.enqueue_many_async(a.conn, [None])  # type: ignore[list-item]
            await txqueue.enqueue_async(a.conn, Task("send", queue=queue))

    run(body)
    assert count(url) == 1


def test_a_typed_enqueue_runs_with_its_arguments_and_bad_ones_write_nothing(
    run: Callable[[Body], None], url: str, queue: str
) -> None:
    registry = txqueue.Registry()
    seen: list[tuple[Parcel, bool]] = []

    @registry.task("ship", queue=queue)
    async def ship(parcel: Parcel, express: bool = False) -> str:
        seen.append((parcel, express))
        return parcel.sku

    ids: list[Any] = []

    async def body(a: AsyncApp) -> None:
        async with a.atomic():
            with pytest.raises(txqueue.InvalidTypeError, match=r"parcel\.sku: must be str"):
                await ship.enqueue_async(a.conn, Parcel(1, PARCEL.weight, PARCEL.ships))  # type: ignore[arg-type]
            with pytest.raises(txqueue.InvalidValueError, match="speed: is not an argument"):
                await ship.enqueue_async(a.conn, PARCEL, speed=2)  # type: ignore[call-arg]
            ids.append(await ship.options(priority=2).enqueue_async(a.conn, PARCEL, express=True))

    run(body)
    [row] = rows(url)
    assert (row["payload"], row["priority"]) == (STORED, 2)
    txqueue.Worker(registry, database_url=url, amqp_url=None).run(burst=True)
    assert seen == [(PARCEL, True)]
    assert asyncio.run(ship.wait_async(url, ids[0], timeout=5)) == "a-1"


def test_tasks_are_managed_on_the_same_connection(
    run: Callable[[Body], None], url: str, queue: str, woken: Woken
) -> None:
    async def body(a: AsyncApp) -> None:
        async with a.atomic():
            task_id = await txqueue.enqueue_async(
                a.conn, Task("send", {"n": 1}, queue=queue, delay=3600)
            )
        with pytest.raises(ZeroDivisionError):
            async with a.atomic():  # in the caller's transaction, undone with it
                assert await txqueue.cancel_async(a.conn, task_id) == "cancelled"
                raise ZeroDivisionError
        async with a.atomic():
            assert (await txqueue.get_task_async(a.conn, task_id)).state == "pending"
            assert await txqueue.cancel_async(a.conn, task_id) == "cancelled"
        with pytest.raises(txqueue.TaskStateError, match="already finished"):
            async with a.atomic():
                await txqueue.cancel_async(a.conn, task_id)
        woken.heard(wait=0.1)
        async with a.atomic():
            await txqueue.retry_async(a.conn, str(task_id))
        assert woken.heard() == [queue]  # the retried task's wake-up, after the commit
        with pytest.raises(txqueue.TaskStateError, match="only failed or cancelled"):
            async with a.atomic():
                await txqueue.retry_async(a.conn, task_id)
        async with a.atomic():
            info = await txqueue.get_task_async(a.conn, task_id)
            listed = await txqueue.list_tasks_async(a.conn, queue=queue, state="pending")
            assert await txqueue.list_tasks_async(a.conn, queue=queue, state="failed") == []
        assert (info.id, info.state, info.payload) == (task_id, "pending", {"n": 1})
        assert [t.id for t in listed] == [task_id]
        with pytest.raises(txqueue.TaskNotFoundError):
            async with a.atomic():
                await txqueue.get_task_async(a.conn, uuid7())
        with pytest.raises(txqueue.InvalidValueError, match="limit"):
            await txqueue.list_tasks_async(a.conn, limit=0)

    run(body)


def test_retry_failed_async_runs_the_failed_tasks_again(
    run: Callable[[Body], None], url: str, queue: str
) -> None:
    registry = txqueue.Registry()

    @registry.task("boom", queue=queue, max_attempts=1)
    def boom(n: int) -> None:
        raise RuntimeError("boom")

    async def body(a: AsyncApp) -> None:
        async with a.atomic():
            for n in range(3):
                await boom.enqueue_async(a.conn, n)
        await asyncio.to_thread(
            txqueue.Worker(registry, database_url=url, amqp_url=None).run, burst=True
        )
        async with a.atomic():
            assert await txqueue.retry_failed_async(a.conn, queue=queue) == 3
        async with a.atomic():
            states = {t.state for t in await txqueue.list_tasks_async(a.conn, queue=queue)}
        assert states == {"pending"}

    run(body)


def test_unique_keys_delays_and_enqueue_many(
    run: Callable[[Body], None], url: str, queue: str
) -> None:
    got: dict[str, Any] = {}

    async def body(a: AsyncApp) -> None:
        async with a.atomic():
            got["first"] = await txqueue.enqueue_async(
                a.conn, Task("send", queue=queue, unique_key="k", delay=60)
            )
            got["again"] = await txqueue.enqueue_async(
                a.conn, Task("send", queue=queue, unique_key="k")
            )
            got["many"] = await txqueue.enqueue_many_async(a.conn, unique_and_delayed(queue))

    run(body)
    check_unique_and_delayed(url, got["first"], got["again"], got["many"])


def test_a_unique_key_raced_by_two_transactions_is_one_task(
    db: tuple[str, str], queue: str
) -> None:
    async def enqueue(app: AsyncApp) -> Any:
        return await txqueue.enqueue_async(app.conn, Task("send", queue=queue, unique_key="r"))

    async def rival() -> Any:
        async with open_async_kind(*db) as b, b.atomic():
            return await enqueue(b)

    async def main() -> tuple[Any, Any]:
        async with open_async_kind(*db) as a:
            async with a.atomic():
                held = await enqueue(a)
                racing = asyncio.create_task(rival())
                done, _ = await asyncio.wait([racing], timeout=0.5)
                assert not done  # its insert waits for this transaction
            return held, await asyncio.wait_for(racing, 30)

    held, raced = asyncio.run(main())
    assert raced == held
    assert count(db[1]) == 1


def test_transaction_async_sends_wake_ups_after_it_commits(
    run: Callable[[Body], None], url: str, queue: str, woken: Woken
) -> None:
    async def body(a: AsyncApp) -> None:
        if type(a.conn).__module__.startswith("sqlalchemy"):
            # SQLAlchemy's begin() owns the transaction: a block of txqueue's inside it
            # would commit on its own, so it is refused.
            with pytest.raises(txqueue.ConfigError, match="begin"):
                async with txqueue.transaction_async(a.conn):
                    pass
            return
        async with txqueue.transaction_async(a.conn):
            await txqueue.enqueue_async(a.conn, Task("send", queue=queue))
            assert woken.heard(wait=0.1) == [] and count(url) == 0
        assert woken.heard() == [queue] and count(url) == 1
        with pytest.raises(ZeroDivisionError):
            async with txqueue.transaction_async(a.conn):
                await txqueue.enqueue_async(a.conn, Task("send", queue=queue))
                1 / 0  # noqa: B018
        assert woken.heard(wait=0.2) == []

    run(body)


def test_a_transaction_async_that_reads_then_writes_survives_a_write_between(
    run: Callable[[Body], None], url: str, queue: str
) -> None:
    """As ``transaction`` (tests/store/test_connection.py): on SQLite the block takes the
    write lock first, so another connection's write waits instead of failing this one."""

    def write() -> None:
        with closing(connect(url)) as other:
            txqueue.enqueue(other, Task("send", queue=queue))
            other.commit()

    async def body(a: AsyncApp) -> None:
        if type(a.conn).__module__.startswith("sqlalchemy"):
            return  # refused: SQLAlchemy's begin() owns the transaction (test above)
        writer = threading.Thread(target=write)
        async with txqueue.transaction_async(a.conn):
            assert await txqueue.count_tasks_async(a.conn) == 0
            writer.start()
            await asyncio.sleep(0.3)  # where nothing holds it back, the write lands now
            await txqueue.enqueue_async(a.conn, Task("send", queue=queue))
        await asyncio.to_thread(writer.join, 20)
        assert not writer.is_alive()
        assert count(url) == 2

    run(body)


def test_a_transaction_async_cancelled_while_it_waits_for_the_lock_keeps_none(
    sqlite_url: str,
) -> None:
    """aiosqlite runs a BEGIN IMMEDIATE on its thread even once its caller is cancelled:
    when the lock frees, the BEGIN takes it, and the block's rollback must undo it."""
    import aiosqlite

    async def main() -> None:
        file = sqlite_path(sqlite_url)
        with closing(sqlite3.connect(file, timeout=2, isolation_level=None)) as holder:
            holder.execute("BEGIN IMMEDIATE")
            async with aiosqlite.connect(sqlite_path(sqlite_url), timeout=30) as conn:

                async def block() -> None:
                    async with txqueue.transaction_async(conn):
                        raise AssertionError("the lock is held: the block never starts")

                waiting = asyncio.create_task(block())
                await asyncio.sleep(0.3)
                waiting.cancel()
                await asyncio.sleep(0.1)
                holder.execute("COMMIT")  # the BEGIN takes the lock now, then is undone
                with pytest.raises(asyncio.CancelledError):
                    await waiting
                await asyncio.sleep(0.5)  # SQLite's busy handler retries the BEGIN meanwhile
                assert not conn.in_transaction
                txqueue.enqueue(holder, Task("send"))  # the file's lock is free

    asyncio.run(main())
    assert count(sqlite_url) == 1


def test_an_asyncpg_pool_itself_is_refused(pg_url: str) -> None:
    """A pool has no transaction to join: each call would take any connection."""
    import asyncpg

    async def main() -> None:
        async with asyncpg.create_pool(pg_url, min_size=1, max_size=1) as pool:
            with pytest.raises(txqueue.InvalidTypeError, match=r"pool\.acquire\(\)"):
                await txqueue.enqueue_async(pool, Task("send"))

    asyncio.run(main())


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
def test_a_unique_key_left_behind_by_a_deleted_task_is_taken_over(
    pg_url: str, queue: str, driver: str
) -> None:
    """The key's row outlived its task (deleted by hand): enqueue frees it and inserts."""
    import asyncpg
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as c:
        old = txqueue.enqueue(c, Task("send", queue=queue, unique_key="k"))
        c.execute("DELETE FROM txqueue_tasks WHERE id = %s", (old,))

    async def main() -> uuid.UUID:
        if driver == "psycopg":
            async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
                return await txqueue.enqueue_async(conn, Task("send", queue=queue, unique_key="k"))
        conn = await asyncpg.connect(pg_url)
        try:
            return await txqueue.enqueue_async(conn, Task("send", queue=queue, unique_key="k"))
        finally:
            await conn.close()

    new = asyncio.run(main())
    assert new != old and [r["id"] for r in rows(pg_url)] == [new]


def test_outside_a_transaction_each_call_commits_on_its_own(
    run: Callable[[Body], None], url: str, queue: str
) -> None:
    """Autocommit psycopg and asyncpg outside ``conn.transaction()``: enqueue_async commits
    alone, and enqueue_many_async as one transaction of its own (all or nothing)."""

    async def body(a: AsyncApp) -> None:
        module = type(a.conn).__module__
        if module.startswith("psycopg"):
            await a.conn.set_autocommit(True)
        elif not module.startswith("asyncpg"):
            return  # SQLAlchemy and aiosqlite open a transaction at the first statement
        await txqueue.enqueue_async(a.conn, Task("send", queue=queue))
        assert count(url) == 1
        await txqueue.enqueue_many_async(a.conn, [Task("a", queue=queue), Task("b", queue=queue)])
        assert count(url) == 3
        execute(url, "ALTER TABLE txqueue_tasks ADD CONSTRAINT no_d CHECK (name <> 'd')")
        with pytest.raises(txqueue.StoreError):  # the second row breaks it: neither lands
            await txqueue.enqueue_many_async(a.conn, [Task(n, queue=queue) for n in "cd"])
        assert count(url) == 3

    run(body)
