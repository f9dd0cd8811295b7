"""The workflow steps an outcome readies: claimed in its transaction for the worker that
wrote it (``ClaimNext``), as the queues allow, or left to their wake-ups; and those an
atomic step's success readies, returned to be woken."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from .... import Task
from ....core.ids import uuid7
from ....core.task import PENDING, RUNNING, SUCCEEDED
from ....errors import StoreError
from ....store.records import Applied, ClaimNext, Outcome, Planned
from ....store.settings import QueueChange
from ....workflows.readiness import OnFailure
from ..case import WORKER, StoreCase, defaults
from .workflows import step, write

Q = ClaimNext(frozenset({"q"}), 4, "w2", defaults())


def _ended_claiming(s: StoreCase, p: Planned, then: ClaimNext) -> Applied:
    """Claim step ``p`` and write its success, claiming what it readies for ``then``."""
    [claimed] = s.claim(p.id, with_=defaults(max_attempts=1))
    outcome = Outcome(claimed.id, claimed.attempts, WORKER, SUCCEEDED, step=claimed.step)
    return s.store.record_outcomes(s.conn, [outcome], then)


def test_an_outcome_claims_the_steps_it_readies_in_its_queues_as_many_as_asked(
    s: StoreCase,
) -> None:
    a = step("a")
    b, c = step("b", {a.id: OnFailure.CANCEL}), step("c", {a.id: OnFailure.CANCEL})
    elsewhere = Planned(uuid7(), Task("t", {}, queue="other"), "d", {str(a.id): "cancel"}, {})
    write(s, a, b, c, elsewhere)

    written = _ended_claiming(s, a, Q._replace(limit=1))

    assert written == {a.id: SUCCEEDED, b.id: PENDING, c.id: PENDING, elsewhere.id: PENDING}
    # Every readied step stays in ``ready``; the one claimed needs no wake-up, the others do.
    assert {r.id for _, r in written.ready} == {b.id, c.id, elsewhere.id}
    [taken] = written.claimed
    assert taken.id in (b.id, c.id) and taken.attempts == 1
    row = s.row(taken.id)
    assert (row["state"], row["worker_id"]) == (RUNNING, "w2")
    left = c.id if taken.id == b.id else b.id
    assert (s.row(left)["state"], s.row(elsewhere.id)["state"]) == (PENDING, PENDING)


def test_an_outcome_claims_no_readied_step_its_queue_holds_back(s: StoreCase) -> None:
    a = step("a")
    b = step("b", {a.id: OnFailure.CANCEL})
    write(s, a, b)
    [claimed] = s.claim(a.id)
    with contextlib.closing(s.connect()) as conn:
        s.store.change_queue(conn, "q", QueueChange(frozenset({"paused"}), paused=True))
        conn.commit()

    outcome = Outcome(claimed.id, claimed.attempts, WORKER, SUCCEEDED, step=claimed.step)
    written = s.store.record_outcomes(s.conn, [outcome], Q)

    assert written[b.id] == PENDING
    assert written.claimed == []
    assert [r.id for _, r in written.ready] == [b.id]


def test_a_refused_claim_leaves_the_outcomes_written_and_the_steps_to_their_wake_ups(
    s: StoreCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = step("a")
    b = step("b", {a.id: OnFailure.CANCEL})
    write(s, a, b)

    def refused(conn: Any, *args: Any) -> Any:
        with s.errors("claim"):  # a statement that fails in the outcome's transaction
            conn.execute("SELECT * FROM txqueue_no_such_table")
        raise AssertionError("the statement above fails")

    [claimed] = s.claim(a.id, with_=defaults(max_attempts=1))
    monkeypatch.setattr(s.store, "claim_ids", refused)
    outcome = Outcome(claimed.id, claimed.attempts, WORKER, SUCCEEDED, step=claimed.step)
    written = s.store.record_outcomes(s.conn, [outcome], Q)

    assert written == {a.id: SUCCEEDED, b.id: PENDING}
    assert written.claimed == [] and isinstance(written.claim_error, StoreError)
    assert [r.id for _, r in written.ready] == [b.id]
    assert (s.row(a.id)["state"], s.row(b.id)["state"]) == (SUCCEEDED, PENDING)


def test_an_atomic_steps_success_returns_the_steps_it_readies(s: StoreCase) -> None:
    a = step("a")
    b = step("b", {a.id: OnFailure.CANCEL})
    write(s, a, b)
    [claimed] = s.claim(a.id, with_=defaults(max_attempts=1))

    with s.store.atomic(s.conn):
        outcome = Outcome(claimed.id, claimed.attempts, WORKER, SUCCEEDED, step=claimed.step)
        written = s.store.record_atomic(s.conn, outcome)

    assert written == {a.id: SUCCEEDED, b.id: PENDING}
    assert [(q, r.id) for q, r in written.ready] == [("q", b.id)]
    assert s.row(b.id)["state"] == PENDING
