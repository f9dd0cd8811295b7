"""The cleaner's store methods on each store: stale_queues, renotify, recover_expired, prune.

Time moves with ``s.advance``; a dead worker is a claim whose lease runs out that way.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import pytest

from ....store.records import Claimed, Recovered
from ..case import WORKER, StoreCase, defaults, finish, near

GRACE = 60.0
LEASE = 30.0
NO_ROW_LOCKS = "no row locks: a writer holds the whole file, so there is nothing to skip"


def lost(
    s: StoreCase,
    name: str = "t",
    payload: Any = None,
    *,
    policy: dict[str, Any] | None = None,
    max_attempts: int = 3,
    **options: Any,
) -> Claimed:
    """A task claimed by a worker that then dies: nothing heartbeats once it is returned."""
    task_id = s.enqueue(name, payload, **options)
    per_name = None if policy is None else {name: {"on_lease_expired": policy}}
    with_ = defaults(name, timeout=LEASE, max_attempts=max_attempts, per_name=per_name)
    [claimed] = s.claim(task_id, with_=with_)
    return claimed


def check_xid(s: StoreCase, xid: str | None) -> None:
    """PostgreSQL names the transaction for the wake-up; SQLite has no way to look one up."""
    if s.kind.xids:
        assert xid is not None and xid.isdigit()
    else:
        assert xid is None


def check_lease_expired(s: StoreCase, entry: dict[str, Any], attempt: int) -> None:
    entry = dict(entry)
    assert near(datetime.fromisoformat(entry.pop("at")), s.now())
    assert entry == {
        "attempt": attempt,
        "worker_id": WORKER,
        "type": "txqueue.LeaseExpired",
        "message": f"lease expired, worker lost: {WORKER} stopped heartbeating",
        "traceback": None,
    }


def recover(s: StoreCase, limit: int = 100, default_max_attempts: int = 5) -> list[Recovered]:
    # RETURNING gives no order on PostgreSQL: sorted, so assertions do not depend on one.
    found = s.store.recover_expired(s.conn, limit, default_max_attempts)
    return sorted(found, key=lambda r: r.id)


def cancel_running(s: StoreCase, task_id: uuid.UUID) -> None:
    app = s.app()
    assert s.store.cancel(app, task_id) == "running"
    app.commit()


# --- stale_queues ----------------------------------------------------------------------


def test_stale_queues_names_each_queue_with_tasks_ripe_for_longer_than_grace(
    s: StoreCase,
) -> None:
    s.enqueue(queue="a")
    s.enqueue(queue="a")
    s.enqueue(queue="b")
    s.advance(GRACE + 1)
    s.enqueue(queue="fresh")

    assert sorted(s.store.stale_queues(s.conn, GRACE)) == ["a", "b"]


def test_stale_queues_counts_grace_from_when_a_task_became_ripe(s: StoreCase) -> None:
    s.enqueue(queue="later", delay=100)
    s.advance(100 + GRACE - 10)
    assert s.store.stale_queues(s.conn, GRACE) == []

    s.advance(11)
    assert s.store.stale_queues(s.conn, GRACE) == ["later"]


def test_stale_queues_leaves_out_tasks_that_are_not_pending(s: StoreCase) -> None:
    s.claim(s.enqueue(queue="running"))
    [done] = s.claim(s.enqueue(queue="succeeded"))
    finish(s, done, "succeeded")
    cancelled = s.enqueue(queue="cancelled")
    app = s.app()
    s.store.cancel(app, cancelled)
    app.commit()
    s.advance(GRACE + 1)

    assert s.store.stale_queues(s.conn, GRACE) == []


def test_stale_queues_leaves_out_tasks_renotified_within_grace(s: StoreCase) -> None:
    s.enqueue()
    s.advance(GRACE + 1)
    assert len(s.store.renotify(s.conn, GRACE, ["q"], 10)) == 1

    assert s.store.stale_queues(s.conn, GRACE) == []
    s.advance(GRACE + 1)
    assert s.store.stale_queues(s.conn, GRACE) == ["q"]


# --- renotify --------------------------------------------------------------------------


def test_renotify_marks_stale_tasks_notified_now_and_returns_them(s: StoreCase) -> None:
    ids = [s.enqueue(), s.enqueue()]
    before = {r["id"]: r for r in s.rows()}
    s.advance(GRACE + 1)

    moved = sorted(s.store.renotify(s.conn, GRACE, ["q"], 10))

    assert [(i, q) for i, q, _ in moved] == [(i, "q") for i in sorted(ids)]
    for _, _, xid in moved:
        check_xid(s, xid)
    assert len({xid for _, _, xid in moved}) == 1  # one marking, one transaction
    now = s.now()
    for row in s.rows():
        assert near(row["notified_at"], now)
        # Nothing else changes: the task is as it was, only its wake-up is sent again.
        assert {**row, "notified_at": None} == before[row["id"]]


def test_renotify_only_marks_tasks_of_the_queues_given(s: StoreCase) -> None:
    a = s.enqueue(queue="a")
    b = s.enqueue(queue="b")
    s.advance(GRACE + 1)

    assert s.store.renotify(s.conn, GRACE, [], 10) == []
    assert [(i, q) for i, q, _ in s.store.renotify(s.conn, GRACE, ["a", "c"], 10)] == [(a, "a")]
    assert s.row(b)["notified_at"] is None


def test_renotify_marks_at_most_limit_and_the_rest_on_the_next_call(s: StoreCase) -> None:
    ids = {s.enqueue(), s.enqueue(), s.enqueue()}
    s.advance(GRACE + 1)

    first = s.store.renotify(s.conn, GRACE, ["q"], 2)
    second = s.store.renotify(s.conn, GRACE, ["q"], 2)

    assert len(first) == 2 and len(second) == 1
    assert {i for i, _, _ in first + second} == ids
    assert s.store.renotify(s.conn, GRACE, ["q"], 2) == []


def test_renotify_marks_a_task_again_only_once_grace_has_passed_since(s: StoreCase) -> None:
    task_id = s.enqueue()
    s.advance(GRACE + 1)
    assert [i for i, _, _ in s.store.renotify(s.conn, GRACE, ["q"], 10)] == [task_id]

    s.advance(GRACE - 10)
    assert s.store.renotify(s.conn, GRACE, ["q"], 10) == []
    s.advance(11)
    assert [i for i, _, _ in s.store.renotify(s.conn, GRACE, ["q"], 10)] == [task_id]


def test_renotify_leaves_fresh_delayed_and_non_pending_tasks(s: StoreCase) -> None:
    s.claim(s.enqueue())
    s.enqueue(delay=GRACE)  # ripe now, but not for longer than grace
    s.enqueue(delay=1000)
    s.advance(GRACE + 1)
    s.enqueue()

    assert s.store.renotify(s.conn, GRACE, ["q"], 10) == []
    assert all(r["notified_at"] is None for r in s.rows())


@pytest.mark.unsupported(sqlite=NO_ROW_LOCKS)
def test_renotify_skips_tasks_another_transaction_holds(s: StoreCase) -> None:
    held, free = s.enqueue(), s.enqueue()
    s.advance(GRACE + 1)
    other = s.app()
    other.execute("SELECT 1 FROM txqueue_tasks WHERE id = %s FOR UPDATE", (held,))

    assert [i for i, _, _ in s.store.renotify(s.conn, GRACE, ["q"], 10)] == [free]
    other.rollback()
    assert [i for i, _, _ in s.store.renotify(s.conn, GRACE, ["q"], 10)] == [held]
