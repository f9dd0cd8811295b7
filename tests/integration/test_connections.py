"""The enqueue contract over every kind of application connection (``kinds.py``): a
committed task runs; a rolled-back one never does and leaves no row; bad input raises
before anything is written and leaves the transaction usable; unique keys, delays and
enqueue_many; task management on the same connection."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import date
from typing import Any

import psycopg
import psycopg.rows
import pytest

import txqueue
from txqueue import Task

from .helpers import count, rows
from .kinds import (
    KINDS,
    PARCEL,
    STORED,
    App,
    Parcel,
    Woken,
    check_diamond,
    check_forked,
    check_unique_and_delayed,
    diamond,
    forked,
    kind_db,
    no_broker,
    open_kind,
    unique_and_delayed,
)

db = kind_db(KINDS)


@pytest.fixture
def app(db: tuple[str, str]) -> Iterator[tuple[App, str]]:
    kind, db_url = db
    with open_kind(kind, db_url) as opened:
        yield opened, db_url


def test_a_committed_task_wakes_a_worker_after_the_commit_and_runs(
    app: tuple[App, str], queue: str, woken: Woken
) -> None:
    a, db_url = app
    with a.atomic():
        task_id = txqueue.enqueue(a.conn, Task("send", {"order": 42}, queue=queue, priority=3))
        assert count(db_url) == 0  # no one else sees it before the commit
        if a.waits_for_commit or woken.notify:
            assert woken.heard(wait=0.1) == []
    assert woken.heard() == [queue]
    [row] = rows(db_url)
    assert (row["id"], row["name"], row["payload"], row["priority"]) == (
        task_id,
        "send",
        {"order": 42},
        3,
    )
    ran: list[Any] = []
    registry = txqueue.Registry()
    registry.task("send", queue=queue)(ran.append)
    txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
    assert ran == [{"order": 42}]


def test_a_rolled_back_task_leaves_no_row(app: tuple[App, str], queue: str, woken: Woken) -> None:
    a, db_url = app
    with pytest.raises(ZeroDivisionError), a.atomic():
        txqueue.enqueue(a.conn, Task("send", queue=queue))
        txqueue.enqueue_many(a.conn, [Task("send", queue=queue), Task("other", queue=queue)])
        1 / 0  # noqa: B018 - the application's transaction fails
    assert count(db_url) == 0
    if a.waits_for_commit or woken.notify:
        assert woken.heard(wait=0.2) == []  # a worker is never woken for it


def test_a_workflow_is_written_whole_on_commit_and_nothing_on_rollback(
    app: tuple[App, str], queue: str, woken: Woken
) -> None:
    a, db_url = app
    flow, steps = diamond(queue)
    with pytest.raises(ZeroDivisionError), a.atomic():
        txqueue.enqueue_workflow(a.conn, flow)
        1 / 0  # noqa: B018 - the application's transaction fails
    assert count(db_url) == 0
    flow, steps = diamond(queue)
    with a.atomic():
        assert txqueue.enqueue_workflow(a.conn, flow) == flow.id
        assert count(db_url) == 0
    with a.atomic():
        info = txqueue.get_workflow(a.conn, flow.id)
        [listed] = txqueue.list_workflows(a.conn, state="running")  # not the rolled back one
    assert [s.step for s in info.steps] == ["send", "send#2", "send#3", "send#4"]
    assert (listed.id, listed.steps["pending"], listed.steps["waiting"]) == (flow.id, 1, 3)
    heard = woken.heard()
    if a.waits_for_commit or woken.notify:
        check_diamond(db_url, steps, heard)
    else:  # woken at once, the first time as the second
        check_diamond(db_url, steps, heard[1:])


def test_a_step_cancelled_by_hand_ends_or_readies_its_children_in_its_transaction(
    app: tuple[App, str], queue: str, woken: Woken
) -> None:
    a, db_url = app
    flow, steps = forked(queue)
    with a.atomic():
        txqueue.enqueue_workflow(a.conn, flow)
    assert woken.heard() == [queue]  # its first step
    with a.atomic():
        assert txqueue.cancel(a.conn, steps[0].id, by="ops") == "cancelled"
    check_forked(db_url, steps, woken.heard())
    with a.atomic():  # what is left of it: the step readied
        assert txqueue.cancel_workflow(a.conn, flow.id, by="ops") == 1
    assert {r["state"] for r in rows(db_url)} == {"cancelled"}


def test_bad_input_raises_before_writing_and_the_transaction_goes_on(
    app: tuple[App, str], queue: str
) -> None:
    a, db_url = app
    with a.atomic():
        with pytest.raises(txqueue.InvalidTypeError, match="task"):
            txqueue.enqueue(a.conn, "send")  # type: ignore[arg-type]
        with pytest.raises(txqueue.InvalidTypeError, match=r"tasks\[1\]"):
            txqueue.enqueue_many(a.conn, [Task("send", queue=queue), {"name": "send"}])  # type: ignore[list-item]
        txqueue.enqueue(a.conn, Task("send", queue=queue))
    assert count(db_url) == 1


def test_a_typed_enqueue_runs_with_its_arguments_and_bad_ones_write_nothing(
    app: tuple[App, str], queue: str
) -> None:
    a, db_url = app
    registry = txqueue.Registry()
    seen: list[tuple[Parcel, bool]] = []

    @registry.task("ship", queue=queue)
    def ship(parcel: Parcel, express: bool = False) -> str:
        seen.append((parcel, express))
        return parcel.sku

    with a.atomic():
        with pytest.raises(txqueue.InvalidTypeError, match=r"parcel\.weight: must be Decimal"):
            ship.enqueue(a.conn, Parcel("a-1", 2.5, date(2026, 12, 1)))  # type: ignore[arg-type]
        with pytest.raises(txqueue.InvalidValueError, match="speed: is not an argument"):
            ship.enqueue(a.conn, PARCEL, speed=2)  # type: ignore[call-arg]
        with pytest.raises(txqueue.InvalidValueError, match="parcel: is missing"):
            ship.enqueue(a.conn)  # type: ignore[call-arg]
        task_id = ship.options(priority=2).enqueue(a.conn, PARCEL, express=True)
    [row] = rows(db_url)
    assert (row["payload"], row["priority"], row["queue"]) == (STORED, 2, queue)
    txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
    assert seen == [(PARCEL, True)]
    assert ship.wait(db_url, task_id, timeout=5) == "a-1"


def test_unique_keys_delays_and_enqueue_many(app: tuple[App, str], queue: str) -> None:
    a, db_url = app
    with a.atomic():
        first = txqueue.enqueue(a.conn, Task("send", queue=queue, unique_key="k", delay=60))
        again = txqueue.enqueue(a.conn, Task("send", queue=queue, unique_key="k"))
        many = txqueue.enqueue_many(a.conn, unique_and_delayed(queue))
    check_unique_and_delayed(db_url, first, again, many)


def test_a_unique_key_raced_by_two_transactions_is_one_task(
    db: tuple[str, str], queue: str
) -> None:
    kind, db_url = db
    got: list[Any] = []

    def rival() -> None:
        try:
            with open_kind(kind, db_url) as b, b.atomic():
                got.append(txqueue.enqueue(b.conn, Task("send", queue=queue, unique_key="r")))
        except BaseException as exc:
            got.append(exc)

    with open_kind(kind, db_url) as a:
        with a.atomic():
            held = txqueue.enqueue(a.conn, Task("send", queue=queue, unique_key="r"))
            racing = threading.Thread(target=rival)
            racing.start()
            racing.join(0.5)
            assert racing.is_alive()  # its insert waits for this transaction
        racing.join(30)
    assert got == [held]
    assert count(db_url) == 1


def test_tasks_are_managed_on_the_same_connection(app: tuple[App, str], queue: str) -> None:
    a, _ = app
    with a.atomic():
        task_id = txqueue.enqueue(a.conn, Task("send", {"n": 1}, queue=queue, delay=3600))
    with a.atomic():
        assert txqueue.cancel(a.conn, task_id) == "cancelled"
    with a.atomic():
        txqueue.retry(a.conn, str(task_id))
    with a.atomic():
        info = txqueue.get_task(a.conn, task_id)
        listed = txqueue.list_tasks(a.conn, queue=queue)
    assert (info.id, info.state, info.payload, info.errors) == (task_id, "pending", {"n": 1}, [])
    assert [t.id for t in listed] == [task_id]


def test_txqueue_transaction_holds_wake_ups_until_it_commits(
    app: tuple[App, str], queue: str, woken: Woken
) -> None:
    a, db_url = app
    if type(a.conn).__module__.startswith(("sqlalchemy", "django")):
        # The framework's own block owns the transaction: one of txqueue's inside it would
        # commit on its own, so it is refused.
        with pytest.raises(txqueue.ConfigError, match="atomic"), txqueue.transaction(a.conn):
            pass
        return
    with txqueue.transaction(a.conn):
        txqueue.enqueue(a.conn, Task("send", queue=queue))
        assert woken.heard(wait=0.1) == [] and count(db_url) == 0
    assert woken.heard() == [queue] and count(db_url) == 1
    with pytest.raises(ZeroDivisionError), txqueue.transaction(a.conn):
        txqueue.enqueue(a.conn, Task("send", queue=queue))
        1 / 0  # noqa: B018
    assert woken.heard(wait=0.2) == [] and count(db_url) == 1


def test_autocommit_and_the_callers_row_factory(pg_url: str, queue: str) -> None:
    """An autocommit psycopg2 connection commits each call alone; a connection whose rows
    are dicts (psycopg's dict_row, psycopg2's RealDictCursor) still works."""
    import psycopg2
    import psycopg2.extras

    conn = psycopg2.connect(pg_url, cursor_factory=psycopg2.extras.RealDictCursor)
    try:
        conn.autocommit = True
        first = txqueue.enqueue(conn, Task("send", queue=queue, unique_key="k"))
        assert count(pg_url) == 1
        assert txqueue.enqueue(conn, Task("send", queue=queue, unique_key="k")) == first
        with txqueue.transaction(conn):
            txqueue.enqueue_many(conn, [Task("a", queue=queue), Task("b", queue=queue)])
        assert count(pg_url) == 3 and txqueue.get_task(conn, first).state == "pending"
    finally:
        conn.close()
    with psycopg.connect(pg_url, row_factory=psycopg.rows.dict_row) as c:
        with c.transaction():
            ids = txqueue.enqueue_many(c, [Task("c", queue=queue), Task("d", queue=queue)])
            ids.append(txqueue.enqueue(c, Task("send", queue=queue, unique_key="k")))
        assert ids[2] == first and txqueue.list_tasks(c, queue=queue)[0].name == "d"
    assert count(pg_url) == 5


@pytest.mark.parametrize("store", ["postgres", "sqlite"])
def test_django_outside_atomic_commits_each_call_and_wakes_at_once(
    request: pytest.FixtureRequest, store: str, queue: str
) -> None:
    db_url = str(request.getfixturevalue("pg_url" if store == "postgres" else "sqlite_url"))
    kind = f"django-{'psycopg' if store == 'postgres' else 'sqlite'}"
    with open_kind(kind, db_url) as a, Woken(queue, db_url) as woken, no_broker():
        task_id = txqueue.enqueue(a.conn, Task("send", queue=queue))  # Django's autocommit
        assert count(db_url) == 1 and woken.heard() == [queue]
        assert txqueue.get_task(a.conn, task_id).state == "pending"
