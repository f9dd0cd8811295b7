"""Task management's store methods on each store: retry_ids, retry_failed, cancel,
get_task, list_tasks, delete_queue, status and listen_finished.

The methods an application calls (retry, cancel, get and list) run on its connection, in
its transaction; the others on txqueue's own.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from ....errors import StoreError
from ....store.records import Moved
from ..case import WORKER, StoreCase, defaults, finish, near

T = TypeVar("T")
ZERO = uuid.UUID(int=0)
NO_ROW_LOCKS = "no row locks: a writer holds the whole file, so there is nothing to skip"
NO_NOTIFICATIONS = "SQLite sends no notifications: a waiter polls"
KEY_TAKEN = "retry: a pending or running task holds the same unique_key"


def committed(s: StoreCase, call: Callable[[Any], T]) -> T:
    """``call`` on an application's connection, in a transaction then committed."""
    app = s.app()
    out = call(app)
    app.commit()
    return out


def failed(s: StoreCase, **options: Any) -> uuid.UUID:
    """A task whose only attempt raised."""
    task_id = s.enqueue(**options)
    [claimed] = s.claim(task_id, with_=defaults(max_attempts=1))
    assert finish(s, claimed, "failed", error="ValueError") == {task_id: "failed"}
    return task_id


def succeeded(s: StoreCase, **options: Any) -> uuid.UUID:
    [claimed] = s.claim(s.enqueue(**options))
    assert finish(s, claimed, "succeeded", result='"ok"') == {claimed.id: "succeeded"}
    return claimed.id


def cancelled(s: StoreCase, **options: Any) -> uuid.UUID:
    task_id = s.enqueue(**options)
    assert committed(s, lambda c: s.store.cancel(c, task_id)) == "cancelled"
    return task_id


def check_moved(s: StoreCase, moved: list[Moved], expected: list[tuple[uuid.UUID, str]]) -> None:
    """``moved`` names exactly the (id, queue) expected, in any order, with the xid of the
    caller's transaction on PostgreSQL (one for all) and none on SQLite."""
    assert sorted((i, q) for i, q, _ in moved) == sorted(expected)
    xids = {xid for _, _, xid in moved}
    if s.kind.xids:
        assert len(xids) == 1 and all(x is not None and x.isdigit() for x in xids)
    else:
        assert xids == {None}


# --- retry_ids -------------------------------------------------------------------------


def test_retry_ids_puts_failed_and_cancelled_tasks_back_to_pending_now(s: StoreCase) -> None:
    fail = failed(s, queue="a")
    cancel = cancelled(s, queue="b")
    # Cancelled while running, then its handler raised: the flag is still set.
    [running] = s.claim(s.enqueue(queue="c"))
    assert committed(s, lambda c: s.store.cancel(c, running.id)) == "running"
    assert finish(s, running, "pending", error="Cancelled") == {running.id: "cancelled"}
    before = {r["id"]: r for r in s.rows()}
    s.advance(100)

    moved = committed(s, lambda c: s.store.retry_ids(c, [fail, cancel, running.id]))

    check_moved(s, moved, [(fail, "a"), (cancel, "b"), (running.id, "c")])
    now = s.now()
    for row in s.rows():
        was = before[row["id"]]
        assert row["state"] == "pending"
        assert near(row["run_at"], now) and near(row["updated_at"], now)
        assert row["finished_at"] is None and row["expires_at"] is None
        assert row["cancel_requested"] is False and row["notified_at"] is None
        # A retry is one more attempt of the same task, not a new task: its history stays.
        for column in ("attempts", "errors", "worker_id", "start_time", "result"):
            assert row[column] == was[column]
    assert s.row(fail)["max_attempts"] == 2  # one more than the attempt it used up
    assert s.row(cancel)["max_attempts"] is None  # never claimed: still the registry's
    assert s.row(running.id)["max_attempts"] == 3


def test_retry_ids_raises_max_attempts_only_when_no_attempt_is_left(s: StoreCase) -> None:
    spare = failed(s, max_attempts=5)
    s.store.retry_ids(s.conn, [spare])

    assert (s.row(spare)["attempts"], s.row(spare)["max_attempts"]) == (1, 5)


def test_retry_ids_leaves_unfinished_succeeded_and_unknown_tasks(s: StoreCase) -> None:
    pending = s.enqueue()
    [running] = s.claim(s.enqueue())
    done = succeeded(s)
    before = s.rows()

    assert committed(s, lambda c: s.store.retry_ids(c, [pending, running.id, done])) == []
    assert committed(s, lambda c: s.store.retry_ids(c, [uuid.uuid4()])) == []
    assert committed(s, lambda c: s.store.retry_ids(c, [])) == []
    assert s.rows() == before


def test_retry_ids_is_undone_with_the_callers_transaction(s: StoreCase) -> None:
    task_id = failed(s)
    app = s.app()
    assert len(s.store.retry_ids(app, [task_id])) == 1
    info = s.store.get_task(app, task_id)
    assert info is not None and info.state == "pending"

    app.rollback()
    assert s.row(task_id)["state"] == "failed"


def test_retry_ids_refuses_a_task_whose_unique_key_a_live_task_holds(s: StoreCase) -> None:
    old = failed(s, unique_key="k")
    live = s.enqueue(unique_key="k")
    app = s.app()

    with pytest.raises(StoreError, match=KEY_TAKEN):
        s.store.retry_ids(app, [old])
    app.rollback()
    assert (s.row(old)["state"], s.row(live)["state"]) == ("failed", "pending")


# --- retry_failed ----------------------------------------------------------------------


def test_retry_failed_moves_failed_tasks_only(s: StoreCase) -> None:
    ids = [failed(s), failed(s, queue="other")]
    cancel = cancelled(s)
    done = succeeded(s)
    s.advance(100)

    moved = committed(s, lambda c: s.store.retry_failed(c, None, ZERO, 100))

    check_moved(s, moved, [(ids[0], "q"), (ids[1], "other")])
    now = s.now()
    for task_id in ids:
        row = s.row(task_id)
        assert (row["state"], row["attempts"], row["max_attempts"]) == ("pending", 1, 2)
        assert near(row["run_at"], now) and row["finished_at"] is None
    assert (s.row(cancel)["state"], s.row(done)["state"]) == ("cancelled", "succeeded")


def test_retry_failed_takes_only_the_queue_given(s: StoreCase) -> None:
    a, b = failed(s, queue="a"), failed(s, queue="b")

    moved = committed(s, lambda c: s.store.retry_failed(c, "a", ZERO, 100))

    check_moved(s, moved, [(a, "a")])
    assert s.row(b)["state"] == "failed"
    assert committed(s, lambda c: s.store.retry_failed(c, "none", ZERO, 100)) == []


def test_retry_failed_pages_in_id_order_after_the_id_given(s: StoreCase) -> None:
    ids = sorted(failed(s) for _ in range(5))

    def page(after: uuid.UUID) -> list[uuid.UUID]:
        return sorted(
            i for i, _, _ in committed(s, lambda c: s.store.retry_failed(c, None, after, 2))
        )

    pages = [page(ZERO)]
    while pages[-1]:
        pages.append(page(pages[-1][-1]))

    assert pages == [ids[0:2], ids[2:4], ids[4:5], []]


def test_retry_failed_starts_strictly_after_the_id_given(s: StoreCase) -> None:
    ids = sorted(failed(s) for _ in range(3))

    moved = committed(s, lambda c: s.store.retry_failed(c, None, ids[0], 100))

    assert sorted(i for i, _, _ in moved) == ids[1:]
    assert s.row(ids[0])["state"] == "failed"


def test_retry_failed_leaves_a_task_whose_unique_key_a_live_task_holds(s: StoreCase) -> None:
    held = failed(s, unique_key="k")
    s.enqueue(unique_key="k")
    free = failed(s, unique_key="j")

    moved = committed(s, lambda c: s.store.retry_failed(c, None, ZERO, 100))

    check_moved(s, moved, [(free, "q")])
    assert s.row(held)["state"] == "failed"


def test_retry_failed_of_two_failed_tasks_sharing_a_unique_key_retries_neither(
    s: StoreCase,
) -> None:
    # Neither key is held by a live task when the page is chosen, so both are picked, and
    # the second one's move collides with the first's: the whole statement fails.
    first, second = failed(s, unique_key="k"), failed(s, unique_key="k")
    app = s.app()

    with pytest.raises(StoreError, match=KEY_TAKEN):
        s.store.retry_failed(app, None, ZERO, 100)
    app.rollback()
    assert (s.row(first)["state"], s.row(second)["state"]) == ("failed", "failed")


@pytest.mark.unsupported(sqlite=NO_ROW_LOCKS)
def test_retry_failed_skips_tasks_another_transaction_holds(s: StoreCase) -> None:
    held, free = failed(s), failed(s)
    other = s.app()
    other.execute("SELECT 1 FROM txqueue_tasks WHERE id = %s FOR UPDATE", (held,))

    moved = committed(s, lambda c: s.store.retry_failed(c, None, ZERO, 100))

    assert [i for i, _, _ in moved] == [free]
    other.rollback()
    assert s.row(held)["state"] == "failed"


# --- cancel ----------------------------------------------------------------------------


def test_cancel_of_a_pending_task_cancels_it_now(s: StoreCase) -> None:
    ripe, delayed = s.enqueue(), s.enqueue(delay=1000)
    s.advance(100)

    assert committed(s, lambda c: s.store.cancel(c, ripe)) == "cancelled"
    assert committed(s, lambda c: s.store.cancel(c, delayed)) == "cancelled"

    now = s.now()
    for row in s.rows():
        assert (row["state"], row["cancel_requested"], row["attempts"]) == ("cancelled", False, 0)
        assert near(row["finished_at"], now) and near(row["updated_at"], now)
    s.advance(1000)
    assert s.claim(ripe, delayed) == []


def test_cancel_of_a_running_task_flags_it_for_its_handler(s: StoreCase) -> None:
    [running] = s.claim(s.enqueue())
    before = s.row(running.id)
    s.advance(10)

    assert committed(s, lambda c: s.store.cancel(c, running.id)) == "running"
    # A second request is harmless: the handler is told once either way.
    assert committed(s, lambda c: s.store.cancel(c, running.id)) == "running"

    row = s.row(running.id)
    assert (row["state"], row["cancel_requested"], row["finished_at"]) == ("running", True, None)
    assert row["expires_at"] == before["expires_at"] and near(row["updated_at"], s.now())
    assert s.store.cancel_requested(s.conn, WORKER, [running.id]) == {running.id}


def test_cancel_of_a_finished_or_unknown_task_returns_none_and_changes_nothing(
    s: StoreCase,
) -> None:
    ids = [succeeded(s), failed(s), cancelled(s)]
    before = s.rows()
    s.advance(10)  # so that a touched updated_at would show

    for task_id in [*ids, uuid.uuid4()]:
        assert committed(s, lambda c, task_id=task_id: s.store.cancel(c, task_id)) is None  # type: ignore[misc]
    assert s.rows() == before


def test_cancel_is_undone_with_the_callers_transaction(s: StoreCase) -> None:
    task_id = s.enqueue()
    app = s.app()
    assert s.store.cancel(app, task_id) == "cancelled"

    app.rollback()
    assert s.row(task_id)["state"] == "pending"
