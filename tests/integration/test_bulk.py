"""Searches by ``TaskFilter`` and bulk retry, cancel and delete, on each store: every field
of a filter narrows what is found and what is changed, pages follow on, and a bulk
operation's batches change tasks as the one-task calls do, in their history."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
import uuid
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import txqueue
from txqueue import Task, TaskFilter
from txqueue.testing import run_tasks

from .helpers import connect, execute


class Flaky(Exception):
    pass


def _registry(queue: str) -> txqueue.Registry:
    registry = txqueue.Registry()

    @registry.task("charge", queue=queue, max_attempts=1)
    def charge(customer: int, plan: str = "basic") -> None:
        if customer % 2:
            raise Flaky(f"card declined for customer {customer}")

    @registry.task("mail", queue=queue, max_attempts=1)
    def mail(customer: int) -> None:
        raise TimeoutError("smtp timed out")

    return registry


def _ids(tasks: list[txqueue.TaskInfo]) -> set[uuid.UUID]:
    return {t.id for t in tasks}


def test_each_field_of_a_filter_narrows_a_search_and_pages_follow_on(
    db_url: str, queue: str, conn: Any
) -> None:
    other = f"{queue}_other"
    before = datetime.now(UTC) - timedelta(seconds=1)
    with txqueue.transaction(conn):
        charges = [
            txqueue.enqueue(conn, Task("charge", {"customer": n, "plan": "pro"}, queue=queue))
            for n in range(6)
        ]
        mails = [txqueue.enqueue(conn, Task("mail", {"customer": n}, queue=queue)) for n in (1, 2)]
        elsewhere = txqueue.enqueue(conn, Task("charge", {"customer": 0}, queue=other))
    run_tasks(_registry(queue), db_url)
    after = datetime.now(UTC) + timedelta(seconds=1)

    def found(**fields: Any) -> set[uuid.UUID]:
        return _ids(txqueue.find_tasks(conn, TaskFilter(**fields), limit=100))

    assert found(name="charge", queue=queue) == set(charges)
    assert found(queue=other) == {elsewhere}
    assert found(name="charge", state="failed") == {charges[n] for n in (1, 3, 5)}
    assert found(state=["succeeded", "pending"]) == {*(charges[n] for n in (0, 2, 4)), elsewhere}
    assert found(payload={"customer": 1}) == {charges[1], mails[0]}
    assert found(payload={"customer": 2, "plan": "pro"}) == {charges[2]}
    assert found(payload={"customer": "2"}) == set()  # a string is not the number
    assert found(error="Flaky") == {charges[n] for n in (1, 3, 5)}
    assert found(error="builtins.TimeoutError") == set(mails)
    assert found(error="TimeoutError") == set(mails)
    assert found(error="CARD DECLINED for customer 3") == {charges[3]}
    assert found(error="Error") == set()  # a type matches whole or after its module
    assert found(created_after=before, created_before=after) == {*charges, *mails, elsewhere}
    assert found(created_after=after) == set()
    assert found(finished_after=before, queue=queue) == {*charges, *mails}
    assert found(finished_before=before) == set()
    assert found(workflow=uuid.uuid4()) == set()
    assert txqueue.count_tasks(conn, TaskFilter(queue=queue, state="failed")) == 5
    assert txqueue.count_tasks(conn) == 9
    assert txqueue.count_tasks(conn, cap=4) == 4  # "4 or more": counting stopped there
    assert txqueue.count_tasks(conn, cap=10) == 9

    first = txqueue.find_tasks(conn, TaskFilter(queue=queue), limit=3)
    second = txqueue.find_tasks(conn, TaskFilter(queue=queue), limit=3, before=first[-1].id)
    rest = txqueue.find_tasks(conn, TaskFilter(queue=queue), limit=10, before=second[-1].id)
    everything = first + second + rest
    assert [t.id for t in everything] == sorted(_ids(everything), reverse=True)  # newest first
    assert _ids(everything) == {*charges, *mails}


def test_a_workflows_steps_are_found_by_its_id(db_url: str, queue: str, conn: Any) -> None:
    registry = _registry(queue)
    charge, mail = registry.get("charge"), registry.get("mail")
    assert charge is not None and mail is not None
    flow = txqueue.Workflow("billing")
    first = flow.step(charge, 2)
    flow.step(mail, 2).after(first)
    with txqueue.transaction(conn):
        workflow_id = txqueue.enqueue_workflow(conn, flow)
        txqueue.enqueue(conn, Task("charge", {"customer": 4}, queue=queue))
    steps = txqueue.find_tasks(conn, TaskFilter(workflow=workflow_id))
    assert sorted(t.name for t in steps) == ["charge", "mail"]
    assert {t.state for t in steps} == {"pending", "waiting"}


def test_bulk_operations_change_only_what_matches_in_batches_with_the_operator_in_history(
    db_url: str, queue: str, conn: Any
) -> None:
    with txqueue.transaction(conn):
        doomed = [
            txqueue.enqueue(conn, Task("charge", {"customer": n}, queue=queue)) for n in range(25)
        ]
        kept = [txqueue.enqueue(conn, Task("mail", {"customer": n}, queue=queue)) for n in range(4)]
    conn.commit()

    cancelled = txqueue.cancel_tasks(
        TaskFilter(name="charge", queue=queue), by="ops: bad price", batch=7, database_url=db_url
    )
    assert cancelled == 25
    infos = {i: txqueue.get_task(conn, i) for i in [*doomed, *kept]}
    conn.commit()
    assert {infos[i].state for i in doomed} == {"cancelled"}
    assert {infos[i].state for i in kept} == {"pending"}
    assert {(infos[i].events[-1].move, infos[i].events[-1].by) for i in doomed} == {
        ("cancel", "ops: bad price")
    }
    # Pending tasks are not finished: a delete leaves them.
    assert txqueue.delete_tasks(TaskFilter(name="mail"), database_url=db_url) == 0

    retried = txqueue.retry_tasks(
        TaskFilter(name="charge", payload={"customer": 3}), by="ops", database_url=db_url
    )
    assert retried == 1
    assert txqueue.get_task(conn, doomed[3]).state == "pending"
    assert txqueue.get_task(conn, doomed[3]).events[-1].by == "ops"
    conn.commit()
    assert (
        txqueue.retry_tasks(
            TaskFilter(state="cancelled", queue=queue), batch=4, database_url=db_url
        )
        == 24
    )

    assert txqueue.cancel_tasks(TaskFilter(queue=queue), database_url=db_url) == 29
    deleted = txqueue.delete_tasks(
        TaskFilter(queue=queue, name="charge"), batch=10, database_url=db_url
    )
    assert deleted == 25
    assert txqueue.count_tasks(conn, TaskFilter(queue=queue)) == 4
    # A filter's state narrows an operation, never widens it.
    with pytest.raises(txqueue.InvalidValueError, match="retry takes tasks that are failed"):
        txqueue.retry_tasks(TaskFilter(state="pending"), database_url=db_url)
    conn.commit()


def test_a_running_task_is_asked_to_stop_once(db_url: str, queue: str, conn: Any) -> None:
    with txqueue.transaction(conn):
        task_id = txqueue.enqueue(conn, Task("charge", {"customer": 1}, queue=queue))
    conn.commit()
    table = "txqueue_tasks"
    execute(db_url, f"UPDATE {table} SET state = 'running', attempts = 1 WHERE name = 'charge'")
    assert txqueue.cancel_tasks(TaskFilter(queue=queue), database_url=db_url) == 1
    info = txqueue.get_task(conn, task_id)
    assert (info.state, info.cancel_requested) == ("running", True)
    conn.commit()
    assert txqueue.cancel_tasks(TaskFilter(queue=queue), database_url=db_url) == 0


def test_the_async_forms_and_an_app_do_the_same(db_url: str, queue: str) -> None:
    with txqueue.App(database_url=db_url, amqp_url=None) as app, closing(connect(db_url)) as c:
        with txqueue.transaction(c):
            ids = [app.enqueue(c, Task("charge", {"customer": n}, queue=queue)) for n in range(3)]
        c.commit()
        assert app.count_tasks(c, TaskFilter(queue=queue)) == 3
        assert asyncio.run(app.cancel_tasks_async(TaskFilter(queue=queue), by="ops")) == 3
        assert _ids(app.find_tasks(c, TaskFilter(queue=queue, state="cancelled"))) == set(ids)
        c.commit()
        assert (
            asyncio.run(txqueue.delete_tasks_async(TaskFilter(queue=queue), database_url=db_url))
            == 3
        )


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"state": "lost"}, "state"),
        ({"state": []}, "state"),
        ({"queue": "no spaces"}, "queue"),
        ({"created_after": datetime(2026, 1, 1)}, "created_after"),
        ({"error": " "}, "error"),
        ({"payload": {"a": [1]}}, "payload['a']"),
        ({"payload": {}}, "payload"),
        ({"workflow": "not-a-uuid"}, "workflow"),
        ({"name": ""}, "name"),
    ],
)
def test_a_bad_filter_is_refused_naming_its_field(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(txqueue.ValidationError) as caught:
        TaskFilter(**fields)
    assert caught.value.field == named


def test_the_how_to_runs_as_written(
    db_url: str, conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "docs" / "snippets"))
    snippet = importlib.import_module("bulk")  # docs/snippets/bulk.py
    monkeypatch.setenv("TXQUEUE_DATABASE_URL", db_url)
    monkeypatch.delenv("TXQUEUE_AMQP_URL", raising=False)
    registry = txqueue.Registry()

    @registry.task("charge", queue="billing", max_attempts=1)
    def charge(customer: int) -> None:
        raise TimeoutError(f"gateway timed out for {customer}")

    with txqueue.transaction(conn):
        for n in (1, 2):
            charge.enqueue(conn, n)
        for n in (42, 42, 7):
            txqueue.enqueue(conn, Task("load", {"customer": n}, queue="imports"))
    conn.commit()
    run_tasks(registry, db_url)
    lines = snippet.find(conn)
    conn.commit()
    assert lines[-1] == "3 pending"
    assert sorted(line.split(" ", 1)[1] for line in lines[:-1]) == [
        "gateway timed out for 1",
        "gateway timed out for 2",
    ]
    assert snippet.change() == (2, 2, 0)
    txqueue.cancel_tasks(TaskFilter(queue="imports"), database_url=db_url)
    run_tasks(registry, db_url)  # the two charges, retried, time out again
    assert snippet.dead_letters(conn) == [
        "2 x charge: builtins.TimeoutError (gateway timed out for 2)"
    ]
    assert txqueue.count_tasks(conn, TaskFilter(name="charge", state="pending")) == 2
    conn.commit()


def test_dead_letters_group_failures_and_a_group_is_retried_or_discarded(
    db_url: str, queue: str, conn: Any
) -> None:
    registry = _registry(queue)

    @registry.task("import", queue=queue, max_attempts=1)
    def import_(n: int) -> None:
        raise KeyError(f"row {n}")

    with txqueue.transaction(conn):
        for n in range(6):  # customers 1, 3 and 5 fail with Flaky
            txqueue.enqueue(conn, Task("charge", {"customer": n}, queue=queue))
        for n in (1, 2):
            txqueue.enqueue(conn, Task("mail", {"customer": n}, queue=queue))
        txqueue.enqueue(conn, Task("import", {"n": 7}, queue=queue))
    conn.commit()
    run_tasks(registry, db_url)
    groups = txqueue.dead_letters(conn, queue=queue)
    conn.commit()
    found = {(g.name, g.error): g for g in groups}
    assert [(g.name, g.error, g.count) for g in groups] == [
        ("charge", f"{__name__}.Flaky", 3),
        ("mail", "builtins.TimeoutError", 2),
        ("import", "builtins.KeyError", 1),
    ]
    charge = found[("charge", f"{__name__}.Flaky")]
    assert charge.first_seen <= charge.last_seen
    assert charge.message == "card declined for customer 5"
    assert txqueue.count_tasks(conn, charge.where) == 3
    assert txqueue.retry_tasks(charge.where, by="ops", database_url=db_url) == 3
    mail = found[("mail", "builtins.TimeoutError")]
    assert txqueue.delete_tasks(mail.where, database_url=db_url) == 2
    left = txqueue.dead_letters(conn, queue=queue)
    assert [(g.name, g.count) for g in left] == [("import", 1)]
    assert txqueue.count_tasks(conn, TaskFilter(name="charge", state="pending")) == 3
    conn.commit()

    scraped = subprocess.run(
        [sys.executable, "-m", "txqueue", "metrics"],
        env={"TXQUEUE_DATABASE_URL": db_url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert 'txqueue_dead_letters{error="builtins.KeyError",name="import"} 1.0' in scraped


def test_a_bulk_retry_leaves_failed_a_task_whose_unique_key_another_holds(
    db_url: str, queue: str, conn: Any
) -> None:
    registry = _registry(queue)
    with txqueue.transaction(conn):
        first = txqueue.enqueue(conn, Task("mail", {"customer": 1}, queue=queue, unique_key="k"))
        free = txqueue.enqueue(conn, Task("mail", {"customer": 2}, queue=queue))
    conn.commit()
    run_tasks(registry, db_url)
    with txqueue.transaction(conn):  # the key is free again: a second task takes it
        second = txqueue.enqueue(conn, Task("mail", {"customer": 3}, queue=queue, unique_key="k"))
    conn.commit()
    run_tasks(registry, db_url)
    with txqueue.transaction(conn):  # and a live one holds it now
        holder = txqueue.enqueue(conn, Task("charge", {"customer": 4}, queue=queue, unique_key="k"))
    conn.commit()
    assert txqueue.retry_tasks(TaskFilter(name="mail"), database_url=db_url) == 1
    states = {i: txqueue.get_task(conn, i).state for i in (first, free, second, holder)}
    assert states == {first: "failed", free: "pending", second: "failed", holder: "pending"}
    txqueue.cancel(conn, holder)
    conn.commit()
    # Freed: one of the two sharing the key is retried, the other left failed.
    assert txqueue.retry_tasks(TaskFilter(name="mail", state="failed"), database_url=db_url) == 1
    assert sorted(txqueue.get_task(conn, i).state for i in (first, second)) == [
        "failed",
        "pending",
    ]
    conn.commit()


def test_numbers_match_by_value_and_a_dotted_type_whole(db_url: str, queue: str, conn: Any) -> None:
    with txqueue.transaction(conn):
        task_id = txqueue.enqueue(conn, Task("mail", {"customer": 42}, queue=queue))
    conn.commit()
    run_tasks(_registry(queue), db_url)
    assert _ids(txqueue.find_tasks(conn, TaskFilter(payload={"customer": 42.0}))) == {task_id}
    assert _ids(txqueue.find_tasks(conn, TaskFilter(failed_with="TimeoutError"))) == {task_id}
    whole = TaskFilter(failed_with="builtins.TimeoutError")
    assert _ids(txqueue.find_tasks(conn, whole)) == {task_id}
    assert txqueue.find_tasks(conn, TaskFilter(failed_with="ns.builtins.TimeoutError")) == []
    assert txqueue.find_tasks(conn, TaskFilter(failed_with="s.TimeoutError")) == []
    (group,) = txqueue.dead_letters(conn, queue=queue)
    assert group.where == TaskFilter(
        name="mail", queue=queue, state="failed", failed_with="builtins.TimeoutError"
    )
    assert txqueue.count_tasks(conn, TaskFilter(queue=queue), cap=1) == 1
    conn.commit()
