"""Enqueues in batches (insert_tasks), and the async stores on their native drivers."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from .... import Task
from ....errors import StoreError
from ....store.connections import bind_async
from ....store.records import Inserted
from ..case import StoreCase
from .enqueue import TRACE, current_xid, names, seconds, trace_of

# --- insert_tasks ------------------------------------------------------------------------


def test_a_batch_of_plain_unique_and_delayed_tasks_comes_back_in_order(s: StoreCase) -> None:
    held = s.enqueue("held", unique_key="taken")
    when = datetime(2031, 1, 1, tzinfo=UTC)
    tasks = [
        Task("plain1", {"i": 1}, queue="q"),
        Task("unique", queue="q", unique_key="fresh"),
        Task("delayed", queue="q", delay=30),
        Task("held", queue="q", unique_key="taken"),
        Task("plain2", {"i": 2}, queue="q", priority=3),
        Task("at", queue="q", run_at=when),
    ]
    app = s.app()
    out = s.store.insert_tasks(app, tasks, trace=TRACE)
    xid = current_xid(s, app)
    app.commit()

    assert [i.new for i in out] == [True, True, True, False, True, True]
    assert out[3] == Inserted(held, False, None)
    assert {i.xid for i in out if i.new} == {xid}
    # The new ids are time-ordered in the order of the tasks given.
    new_ids = [i.id for i in out if i.new]
    assert new_ids == sorted(new_ids)

    by_id = {r["id"]: r for r in s.rows()}
    assert len(by_id) == 6
    for task, result in zip(tasks, out, strict=True):
        if result.new:
            row = by_id[result.id]
            assert (row["name"], row["payload"], row["priority"], row["unique_key"]) == (
                task.name,
                task.payload,
                task.priority,
                task.unique_key,
            )
            assert trace_of(row) == json.loads(TRACE)
    assert seconds(by_id[out[2].id]["run_at"], by_id[out[2].id]["created_at"]) == pytest.approx(
        30, abs=1e-3
    )
    assert by_id[out[5].id]["run_at"] == when
    assert by_id[out[0].id]["run_at"] == by_id[out[0].id]["created_at"]


def test_a_unique_key_twice_in_one_batch_gives_the_second_the_first(s: StoreCase) -> None:
    app = s.app()
    out = s.store.insert_tasks(
        app,
        [
            Task("a", queue="q", unique_key="k"),
            Task("b", queue="q"),
            Task("a", queue="q", unique_key="k", delay=10),
        ],
    )
    app.commit()

    assert out[0].new and out[1].new
    assert out[2] == Inserted(out[0].id, False, None)
    assert names(s) == ["a", "b"]


def test_an_empty_batch_inserts_nothing(s: StoreCase) -> None:
    app = s.app()
    assert s.store.insert_tasks(app, []) == []
    app.commit()
    assert s.store.insert_tasks(s.conn, []) == []
    assert s.rows() == []


def test_a_batch_is_invisible_until_the_app_commits_and_gone_on_rollback(s: StoreCase) -> None:
    batch = [Task("a", queue="q"), Task("b", queue="q", unique_key="k"), Task("c", queue="q")]
    app = s.app()
    s.store.insert_tasks(app, batch)
    assert s.rows() == []
    app.rollback()
    assert s.rows() == []

    out = s.store.insert_tasks(app, batch)
    app.commit()
    assert [r["id"] for r in s.rows()] == [i.id for i in out]


def test_a_batch_on_an_autocommit_connection_is_committed_by_the_call(s: StoreCase) -> None:
    out = s.store.insert_tasks(
        s.conn, [Task("a", queue="q"), Task("b", queue="q", unique_key="k", delay=5)]
    )
    assert [r["id"] for r in s.rows()] == [i.id for i in out]
    if s.kind.xids:
        # One transaction of its own: one xid for the wake-ups.
        assert out[0].xid == out[1].xid and out[0].xid is not None


def test_a_batch_failing_on_an_autocommit_connection_is_all_or_nothing_on_postgres_only(
    s: StoreCase,
) -> None:
    for statement in s.kind.refuse_inserts("NEW.name = 'boom'", "boom refused"):
        s.execute(statement)
    batch = [Task("a", queue="q"), Task("boom", queue="q"), Task("c", queue="q")]

    with pytest.raises(StoreError, match="boom refused"):
        s.store.insert_tasks(s.conn, batch)

    # PostgreSQL runs the batch in a transaction of its own. SQLite, today, runs each
    # insert as a statement of its own on the autocommit connection, so the tasks before
    # the failing one stay committed.
    assert names(s) == ([] if s.kind.atomic_batches else ["a"])


@pytest.mark.unsupported(sqlite="sqlite3 has no pipeline mode")
def test_a_batch_inside_the_callers_pipeline_is_inserted_without_copy(s: StoreCase) -> None:
    app = s.app()
    with app.pipeline():
        out = s.store.insert_tasks(
            app, [Task("a", queue="q"), Task("b", queue="q"), Task("c", queue="q", unique_key="k")]
        )
    app.commit()
    assert all(i.new for i in out)
    assert [r["id"] for r in s.rows()] == [i.id for i in out]


# --- the async stores, on their native drivers ---------------------------------------------


async def _open_native(s: StoreCase, *, autocommit: bool = False) -> Any:
    return await s.kind.open_async(s.url, autocommit)


def test_the_async_store_inserts_and_reads_in_the_callers_transaction(s: StoreCase) -> None:
    seen: dict[str, Any] = {}

    async def main() -> None:
        raw = await _open_native(s)
        try:
            adapted = await bind_async(raw)
            store, conn = adapted.store, adapted.conn
            one = await store.insert_task(conn, Task("t", {"n": 1}, queue="q", unique_key="k"))
            many = await store.insert_tasks(
                conn,
                [
                    Task("u", queue="q"),
                    Task("t", queue="q", unique_key="k"),
                    Task("w", queue="q", delay=60),
                ],
                trace=TRACE,
            )
            seen["own"] = await store.get_task(conn, one.id)
            seen["before_commit"] = s.rows()
            await raw.commit()
            seen["missing"] = await store.get_task(conn, uuid.uuid4())
            await store.insert_task(conn, Task("rolled-back", queue="q"))
            await raw.rollback()
            seen["one"], seen["many"] = one, many
        finally:
            await raw.close()

    asyncio.run(main())

    one, many = seen["one"], seen["many"]
    assert one.new and many[0].new and many[2].new
    assert many[1] == Inserted(one.id, False, None)
    if s.kind.xids:
        assert one.xid is not None and one.xid == many[0].xid == many[2].xid
    else:
        assert one.xid is None and many[0].xid is None
    assert seen["before_commit"] == []
    assert seen["missing"] is None

    info = seen["own"]
    assert (info.id, info.name, info.payload, info.state, info.unique_key, info.attempts) == (
        one.id,
        "t",
        {"n": 1},
        "pending",
        "k",
        0,
    )
    rows = {r["name"]: r for r in s.rows()}
    assert sorted(rows) == ["t", "u", "w"]
    assert seconds(rows["w"]["run_at"], rows["w"]["created_at"]) == pytest.approx(60, abs=1e-3)
    assert {n: trace_of(r) for n, r in rows.items()} == {
        "t": None,
        "u": json.loads(TRACE),
        "w": json.loads(TRACE),
    }


def test_an_async_batch_on_an_autocommit_connection_is_committed_by_the_call(
    s: StoreCase,
) -> None:
    got: list[Inserted] = []

    async def main() -> None:
        raw = await _open_native(s, autocommit=True)
        try:
            adapted = await bind_async(raw)
            got.extend(
                await adapted.store.insert_tasks(
                    adapted.conn, [Task("a", queue="q"), Task("b", queue="q", unique_key="k")]
                )
            )
        finally:
            await raw.close()

    asyncio.run(main())
    assert [r["id"] for r in s.rows()] == [i.id for i in got]
    if s.kind.xids:
        assert got[0].xid == got[1].xid and got[0].xid is not None
