"""enqueue and enqueue_many, on each store: the row lives and dies with the caller's
transaction."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import txqueue
from txqueue import Task

from .helpers import connect, count, rows


def test_committed_task_exists_with_its_fields(conn: Any, db_url: str) -> None:
    run_at = datetime.now(UTC) + timedelta(hours=1)
    with txqueue.transaction(conn):
        task_id = txqueue.enqueue(
            conn,
            Task(
                "send",
                {"order": 42},
                queue="emails",
                priority=5,
                run_at=run_at,
                max_attempts=3,
                timeout=12.5,
                unique_key="order-42",
            ),
        )
    assert isinstance(task_id, uuid.UUID) and task_id.version == 7
    [row] = rows(db_url)
    assert row["id"] == task_id
    assert (row["name"], row["queue"], row["payload"], row["state"]) == (
        "send",
        "emails",
        {"order": 42},
        "pending",
    )
    assert (row["priority"], row["max_attempts"], row["timeout"]) == (5, 3, 12.5)
    assert row["run_at"] == run_at and row["unique_key"] == "order-42"
    assert row["attempts"] == 0 and row["errors"] == []


def test_rolled_back_task_does_not_exist(conn: Any, db_url: str) -> None:
    with pytest.raises(ZeroDivisionError), txqueue.transaction(conn):
        txqueue.enqueue(conn, Task("send"))
        1 / 0  # noqa: B018 - the application's transaction fails
    assert count(db_url) == 0


def test_enqueue_never_commits_for_the_caller(conn: Any, db_url: str) -> None:
    txqueue.enqueue(conn, Task("send"))
    assert count(db_url) == 0  # invisible to others until the caller commits
    conn.commit()
    assert count(db_url) == 1


def test_autocommit_connection_commits_the_insert_alone(db_url: str) -> None:
    with contextlib.closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue(c, Task("send"))
        assert count(db_url) == 1


def test_delay_counts_from_the_enqueue(conn: Any, db_url: str) -> None:
    with txqueue.transaction(conn):
        txqueue.enqueue(conn, Task("send", delay=timedelta(minutes=10)))
        txqueue.enqueue(conn, Task("send", delay=30))
    a, b = rows(db_url)
    assert timedelta(minutes=9) < a["run_at"] - a["created_at"] <= timedelta(minutes=10)
    assert timedelta(seconds=29) < b["run_at"] - b["created_at"] <= timedelta(seconds=30)


def test_enqueue_many_returns_ids_in_order(conn: Any, db_url: str) -> None:
    tasks = [Task("n", {"i": i}, priority=i % 3) for i in range(500)]
    with txqueue.transaction(conn):
        ids = txqueue.enqueue_many(conn, tasks)
    assert len(set(ids)) == 500
    by_id = {r["id"]: r for r in rows(db_url)}
    assert [by_id[i]["payload"]["i"] for i in ids] == list(range(500))
    assert txqueue.enqueue_many(conn, []) == []


def test_enqueue_many_mixes_plain_keyed_and_delayed_tasks(db_url: str) -> None:
    """Plain tasks take the bulk path, the others one INSERT: the ids keep the call's order,
    payloads come back byte for byte, and an autocommit call commits all of it at once."""
    awkward = {"t": "tab\there\nnew\\line \\N", "u": "ünï €", "q": '"x"', "n": None}
    tasks = [
        Task("n", {"i": 0}),
        Task("n", {"i": 1}, unique_key="k1"),
        Task("n", awkward, priority=-5, max_attempts=3, timeout=7.5),
        Task("n", {"i": 3}, delay=60),
        Task("n", [1, 2.5, "x"], queue="other"),
    ]
    with contextlib.closing(connect(db_url, autocommit=True)) as c:
        ids = txqueue.enqueue_many(c, tasks)
    by_id = {r["id"]: r for r in rows(db_url)}
    assert [by_id[i]["payload"] for i in ids] == [t.payload for t in tasks]
    assert by_id[ids[1]]["unique_key"] == "k1"
    assert (by_id[ids[2]]["priority"], by_id[ids[2]]["max_attempts"]) == (-5, 3)
    assert by_id[ids[2]]["timeout"] == 7.5
    assert by_id[ids[3]]["run_at"] - by_id[ids[3]]["created_at"] > timedelta(seconds=59)
    assert by_id[ids[4]]["queue"] == "other"
    assert all(r["state"] == "pending" for r in by_id.values())


def test_enqueue_many_inside_a_psycopg_pipeline(pg_url: str) -> None:
    with contextlib.closing(connect(pg_url)) as c, c.transaction(), c.pipeline():
        ids = txqueue.enqueue_many(c, [Task("n", {"i": i}) for i in range(3)])
    assert sorted(r["payload"]["i"] for r in rows(pg_url)) == [0, 1, 2]
    assert len(set(ids)) == 3


def test_enqueue_many_is_one_statement_that_rolls_back_whole(conn: Any, db_url: str) -> None:
    with pytest.raises(RuntimeError), txqueue.transaction(conn):
        txqueue.enqueue_many(conn, [Task("n") for _ in range(10)])
        raise RuntimeError
    assert count(db_url) == 0


def test_bad_input_raises_before_writing(conn: Any, db_url: str) -> None:
    with pytest.raises(txqueue.InvalidTypeError) as info:
        txqueue.enqueue_many(conn, [Task("ok"), {"name": "not a task"}])  # type: ignore[list-item]
    assert info.value.field == "tasks[1]"
    with pytest.raises(txqueue.InvalidTypeError, match="conn"):
        txqueue.enqueue(object(), Task("ok"))
    conn.commit()
    assert count(db_url) == 0


def test_unique_key_returns_the_live_task(conn: Any, db_url: str) -> None:
    with txqueue.transaction(conn):
        first = txqueue.enqueue(conn, Task("send", unique_key="k"))
        again = txqueue.enqueue(conn, Task("send", {"other": 1}, unique_key="k"))
        [many] = txqueue.enqueue_many(conn, [Task("send", unique_key="k")])
    assert first == again == many
    assert count(db_url) == 1
    conn.execute("UPDATE txqueue_tasks SET state = 'succeeded'")
    conn.commit()
    with txqueue.transaction(conn):
        fresh = txqueue.enqueue(conn, Task("send", unique_key="k"))
    assert fresh != first  # a finished task no longer holds its key
    assert count(db_url) == 2


def test_a_unique_key_held_by_another_task_name_is_refused_writing_nothing(
    conn: Any, db_url: str
) -> None:
    with txqueue.transaction(conn):
        held = txqueue.enqueue(conn, Task("send", unique_key="k"))
    refused = r"unique_key: 'k' is held by the live task send .*, not a charge"
    with txqueue.transaction(conn):
        with pytest.raises(txqueue.InvalidValueError, match=refused):
            txqueue.enqueue(conn, Task("charge", unique_key="k"))
        with pytest.raises(txqueue.InvalidValueError, match=refused):
            txqueue.enqueue_many(
                conn, [Task("charge", unique_key="j"), Task("charge", unique_key="k")]
            )
        # Two names for one key in one call: refused whichever the store meets first.
        with pytest.raises(txqueue.InvalidValueError, match=r"unique_key: 'm' .*refund"):
            txqueue.enqueue_many(
                conn, [Task("charge", unique_key="m"), Task("refund", unique_key="m")]
            )
        assert txqueue.enqueue(conn, Task("send", unique_key="k")) == held  # still usable
    assert [r["name"] for r in rows(db_url)] == ["send"]  # nothing of the refused calls


def test_unique_key_under_concurrent_enqueue(db_url: str) -> None:
    """Eight transactions race for one key; each sees the others' commits, not their rows."""
    barrier = threading.Barrier(8)
    ids: list[uuid.UUID] = []
    errors: list[BaseException] = []

    def racer() -> None:
        try:
            with contextlib.closing(connect(db_url)) as c:
                barrier.wait()  # outside: on SQLite the block takes the one write lock
                with txqueue.transaction(c):
                    ids.append(txqueue.enqueue(c, Task("send", unique_key="race")))
                    time.sleep(0.05)  # hold the transaction open so the others wait on it
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=racer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(ids) == 8 and len(set(ids)) == 1
    assert count(db_url) == 1


def test_missing_schema_is_a_clear_store_error(db_url: str) -> None:
    with contextlib.closing(connect(db_url)) as c:
        c.execute("DROP TABLE txqueue_tasks")
        with pytest.raises(txqueue.StoreError, match="txqueue init"):
            txqueue.enqueue(c, Task("send"))
