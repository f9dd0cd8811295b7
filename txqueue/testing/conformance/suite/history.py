"""Every task's history: each state change appends its event in the write that makes it,
on both stores, so the history can never disagree with the row."""

from __future__ import annotations

import uuid
from datetime import timedelta

from ....core import failures, lifecycle
from ....core.lifecycle import Fence, Move, Transition
from ....core.stored import Event
from ....core.task import CANCELLED, FAILED, PENDING, RUNNING, SUCCEEDED
from ....store.records import HistoryFilter
from ..case import WORKER, StoreCase, defaults, finish, near


def history(s: StoreCase, task_id: uuid.UUID) -> list[tuple[str, int, str, str, str | None]]:
    """(move, attempt, from, to, by) of each event, oldest first, read with ``get_task``."""
    info = s.store.get_task(s.conn, task_id)
    assert info is not None
    return [(e.move, e.attempt, e.from_state, e.to_state, e.by) for e in info.events]


def test_a_task_that_succeeds_has_its_claim_and_its_success(s: StoreCase) -> None:
    task_id = s.enqueue()
    assert history(s, task_id) == []
    [claimed] = s.claim(task_id)
    # The claim writes no event (one write lighter on the hot path): the running attempt's
    # line comes from the row, and later from the change that ends the attempt.
    assert s.row(task_id)["events"] == []
    assert history(s, task_id) == [(Move.CLAIMED, 1, PENDING, RUNNING, WORKER)]
    finish(s, claimed, SUCCEEDED, result='"ok"')
    [stored] = s.row(task_id)["events"]
    assert Event.of_json(stored).move == Move.SUCCEEDED and stored["worker"] == WORKER

    assert history(s, task_id) == [
        (Move.CLAIMED, 1, PENDING, RUNNING, WORKER),
        (Move.SUCCEEDED, 1, RUNNING, SUCCEEDED, WORKER),
    ]
    info = s.store.get_task(s.conn, task_id)
    assert info is not None and all(near(e.at, s.now()) for e in info.events)
    assert info.events[-1].reason is None


def test_an_entry_leaves_out_what_the_rest_of_it_says_and_reads_back_whole(
    s: StoreCase,
) -> None:
    # A store may keep an entry short (Event.of_json reads what the built-in ones leave
    # out); read back, it is whole.
    done, asked = s.enqueue(), s.enqueue()
    claims = {c.id: c for c in s.claim(done, asked)}
    finish(s, claims[done], SUCCEEDED)
    assert history(s, done)[-1] == (Move.SUCCEEDED, 1, RUNNING, SUCCEEDED, WORKER)
    # A running task's change made by no one reads as no one's, not as its worker's.
    assert s.store.cancel(s.conn, asked, by=None) == RUNNING
    assert history(s, asked)[-1] == (Move.CANCEL, 1, RUNNING, RUNNING, None)
    found = s.store.history(s.conn, HistoryFilter(by=WORKER))
    assert {(e.task_id, e.event.move) for e in found} == {
        (done, Move.CLAIMED),
        (done, Move.SUCCEEDED),
        (asked, Move.CLAIMED),
    }


def test_a_retry_then_a_success_names_the_error_of_the_failed_attempt(s: StoreCase) -> None:
    task_id = s.enqueue()
    [first] = s.claim(task_id)
    finish(s, first, PENDING, error="ValueError")
    [second] = s.claim(task_id)
    finish(s, second, SUCCEEDED)

    assert history(s, task_id) == [
        (Move.CLAIMED, 1, PENDING, RUNNING, WORKER),
        (Move.RETRIED, 1, RUNNING, PENDING, WORKER),
        (Move.CLAIMED, 2, PENDING, RUNNING, WORKER),
        (Move.SUCCEEDED, 2, RUNNING, SUCCEEDED, WORKER),
    ]
    info = s.store.get_task(s.conn, task_id)
    assert info is not None and info.events[1].reason == "ValueError: boom"


def test_a_lost_lease_is_recovered_by_the_cleaner_and_the_late_outcome_leaves_no_event(
    s: StoreCase,
) -> None:
    task_id = s.enqueue()
    [claimed] = s.claim(task_id)
    s.advance(31)
    [recovered] = s.store.recover_expired(s.conn, 10, 5)
    assert recovered.state == PENDING
    assert finish(s, claimed, SUCCEEDED) == {}  # fenced out: the attempt is no longer its

    assert history(s, task_id) == [
        (Move.CLAIMED, 1, PENDING, RUNNING, WORKER),
        (Move.RECOVERED, 1, RUNNING, PENDING, lifecycle.CLEANER),
    ]
    info = s.store.get_task(s.conn, task_id)
    assert info is not None and info.events[-1].reason is not None
    assert info.events[-1].reason.startswith(f"{failures.LEASE_EXPIRED}: lease expired")


def test_a_recovery_by_a_worker_names_that_worker(s: StoreCase) -> None:
    task_id = s.enqueue()
    s.claim(task_id)
    s.advance(31)
    [recovered] = s.store.recover_expired(s.conn, 10, 5, None, "host:42:survivor")
    assert recovered.state == PENDING
    assert history(s, task_id)[-1] == (Move.RECOVERED, 1, RUNNING, PENDING, "host:42:survivor")


def test_a_cancel_during_a_retry_ends_the_task_and_says_who(s: StoreCase) -> None:
    task_id = s.enqueue()
    [claimed] = s.claim(task_id)
    assert s.store.cancel(s.conn, task_id, by="ops") == RUNNING  # asked; the handler runs on
    finish(s, claimed, PENDING, error="ValueError")  # its retry becomes the end

    assert history(s, task_id) == [
        (Move.CLAIMED, 1, PENDING, RUNNING, WORKER),
        (Move.CANCEL, 1, RUNNING, RUNNING, "ops"),
        (Move.RETRIED, 1, RUNNING, CANCELLED, WORKER),
    ]
    pending = s.enqueue()
    assert s.store.cancel(s.conn, pending, by="ops") == CANCELLED
    assert history(s, pending) == [(Move.CANCEL, 0, PENDING, CANCELLED, "ops")]


def test_compensation_is_the_recovery_of_the_lost_task(s: StoreCase) -> None:
    task_id = s.enqueue()
    spec = {"policy": "compensate", "name": "refund", "queue": "q"}
    s.claim(task_id, with_=defaults(per_name={"t": {"on_lease_expired": spec}}))
    s.advance(31)
    [recovered] = s.store.recover_expired(s.conn, 10, 5)
    assert recovered.compensation is not None

    assert history(s, task_id)[-1] == (Move.RECOVERED, 1, RUNNING, FAILED, lifecycle.CLEANER)
    assert history(s, recovered.compensation[1].id) == []  # enqueued, not yet claimed


def test_a_failed_task_retried_by_hand_says_by_whom(s: StoreCase) -> None:
    task_id = s.enqueue()
    [claimed] = s.claim(task_id, with_=defaults(max_attempts=1))
    finish(s, claimed, FAILED, error="ValueError")
    app = s.app()
    assert [m[0] for m in s.store.retry_ids(app, [task_id], by="ops")] == [task_id]
    app.commit()

    assert history(s, task_id)[-2:] == [
        (Move.FAILED, 1, RUNNING, FAILED, WORKER),
        (Move.RETRY, 1, FAILED, PENDING, "ops"),
    ]


def test_a_release_and_a_give_back_are_in_the_history(s: StoreCase) -> None:
    released, given = s.enqueue(), s.enqueue()
    s.claim(released, given)
    assert s.store.release(s.conn, WORKER, [(released, 1)]) == {released: PENDING}
    assert s.store.give_back(s.conn, WORKER, [(given, 1)]) == 1

    assert history(s, released)[-1] == (Move.RELEASED, 1, RUNNING, PENDING, WORKER)
    # The claim undone: the attempt it counted never began (the task's attempts are back
    # to 0); the event names the attempt it gave back.
    assert history(s, given)[-2:] == [
        (Move.CLAIMED, 1, PENDING, RUNNING, WORKER),
        (Move.GIVEN_BACK, 1, RUNNING, PENDING, WORKER),
    ]
    assert s.row(given)["attempts"] == 0


def test_a_transition_fenced_out_changes_nothing_and_records_nothing(s: StoreCase) -> None:
    task_id = s.enqueue()
    [claimed] = s.claim(task_id)
    wrong = [
        lifecycle.ended(task_id, 2, WORKER, SUCCEEDED),  # another attempt
        lifecycle.ended(task_id, 1, "someone else", SUCCEEDED),  # another worker
        Transition(task_id, Move.CANCEL, Fence(PENDING), CANCELLED, "ops"),
    ]
    for t in wrong:
        assert s.store.apply(s.conn, [t]) == {}
    assert s.row(task_id)["state"] == RUNNING
    assert [e[0] for e in history(s, task_id)] == [Move.CLAIMED]
    assert finish(s, claimed, SUCCEEDED) == {task_id: SUCCEEDED}


def test_history_reads_the_events_that_match_newest_first(s: StoreCase) -> None:
    ok, other, bad = s.enqueue("t"), s.enqueue("u"), s.enqueue("t", queue="q2")
    claims = {c.id: c for c in s.claim(ok, other, bad, with_=defaults("t", "u", max_attempts=1))}
    finish(s, claims[ok], SUCCEEDED)
    s.advance(5)
    finish(s, claims[bad], FAILED, error="ValueError")
    s.advance(5)
    finish(s, claims[other], SUCCEEDED)

    def read(**filters: object) -> list[tuple[uuid.UUID, str]]:
        found = s.store.history(s.conn, HistoryFilter(**filters))  # type: ignore[arg-type]
        return [(e.task_id, e.event.move) for e in found]

    everything = read()
    assert everything[0] == (other, Move.SUCCEEDED) and len(everything) == 6
    at = [e.event.at for e in s.store.history(s.conn, HistoryFilter())]
    assert at == sorted(at, reverse=True)
    assert read(name="u") == [(other, Move.SUCCEEDED), (other, Move.CLAIMED)]
    assert read(queue="q2", state=FAILED) == [(bad, Move.FAILED)]
    assert {i for i, _ in read(by=WORKER)} == {ok, other, bad}
    assert read(by="nobody") == []
    assert read(since=s.now() - timedelta(seconds=2)) == [(other, Move.SUCCEEDED)]
    assert read(until=s.now() - timedelta(seconds=8), state=SUCCEEDED) == [(ok, Move.SUCCEEDED)]
    assert len(read(limit=2)) == 2
