"""Workflows in the store: a plan written in the caller's transaction, waiting steps no
claim sees, and each step readied, blocked or skipped by the write that ends its last (or
failed) parent, with its parents' results merged into its arguments."""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Any

from .... import Task
from ....core.ids import uuid7
from ....core.stored import Event
from ....core.task import CANCELLED, FAILED, PENDING, SUCCEEDED, WAITING
from ....store.records import Planned, Poll, WorkflowPlan
from ....workflows.readiness import OnFailure
from ..case import StoreCase, defaults, finish
from .claims import near


def step(
    name: str,
    parents: dict[uuid.UUID, OnFailure] | None = None,
    inputs: dict[str, Any] | None = None,
    payload: Any = None,
) -> Planned:
    """A step of task "t" named ``name``."""
    return Planned(
        uuid7(),
        Task("t", {} if payload is None else payload, queue="q"),
        name,
        {str(p): str(on) for p, on in (parents or {}).items()},
        inputs or {},
    )


def result_of(*parents: Planned, kind: str = "result") -> dict[str, Any]:
    ids = [str(p.id) for p in parents]
    return {"as": kind, "from": ids if len(ids) > 1 else ids[0]}


def write(s: StoreCase, *steps: Planned, commit: bool = True) -> WorkflowPlan:
    plan = WorkflowPlan(uuid7(), "w", list(steps))
    with contextlib.closing(s.connect()) as c:
        s.store.insert_workflow(c, plan)
        if commit:
            c.commit()
        else:
            c.rollback()
    return plan


def run(
    s: StoreCase, p: Planned, state: str = SUCCEEDED, result: Any = None
) -> dict[uuid.UUID, str]:
    """Claim step ``p`` and end its attempt in ``state``; what the write changed."""
    [claimed] = s.claim(p.id, with_=defaults(max_attempts=1))
    assert claimed.step
    text = None if result is None else json.dumps(result)
    error = "ValueError" if state == FAILED else None
    return finish(s, claimed, state, result=text, error=error)


def events(s: StoreCase, p: Planned) -> list[Event]:
    return [Event.of_json(e) for e in s.row(p.id)["events"]]


def test_a_workflow_is_written_with_its_first_steps_ready_and_the_others_waiting(
    s: StoreCase,
) -> None:
    a = step("a")
    b = step("b", {a.id: OnFailure.CANCEL})
    plan = write(s, a, b)

    assert s.row(a.id)["state"] == PENDING
    assert s.row(b.id)["state"] == WAITING
    assert {r["workflow_id"] for r in s.rows()} == {plan.id}
    assert [r["step"] for r in s.rows()] == ["a", "b"]
    # A waiting step is not claimable, by id or by a poll.
    assert s.claim(b.id) == []
    polled = s.store.claim_ripe(s.conn, Poll("q", 10, "w2", defaults()))
    assert [c.id for c in polled.claimed] == [a.id]


def test_a_rolled_back_workflow_leaves_nothing(s: StoreCase) -> None:
    a = step("a")
    write(s, a, step("b", {a.id: OnFailure.CANCEL}), commit=False)
    assert s.rows() == []


def test_the_end_of_a_parent_readies_its_child_with_its_result_in_the_same_write(
    s: StoreCase,
) -> None:
    a = step("a")
    b = step("b", {a.id: OnFailure.CANCEL}, {"x": result_of(a)}, payload={"y": 1})
    write(s, a, b)

    written = run(s, a, result={"n": [1, 2]})

    assert written == {a.id: SUCCEEDED, b.id: PENDING}
    assert [(q, r.id) for q, r in written.ready] == [("q", b.id)]  # type: ignore[attr-defined]
    row = s.row(b.id)
    assert (row["state"], row["payload"]) == (PENDING, {"y": 1, "x": {"n": [1, 2]}})
    [readied] = events(s, b)
    assert (readied.move, readied.from_state, readied.to_state, readied.by) == (
        "readied",
        WAITING,
        PENDING,
        "workflow",
    )
    [claimed] = s.claim(b.id)
    assert claimed.payload == {"y": 1, "x": {"n": [1, 2]}}


def test_a_readied_step_is_due_from_its_readying_and_its_deadline_counts_from_there(
    s: StoreCase,
) -> None:
    a = step("a")
    b = step("b", {a.id: OnFailure.CANCEL})
    b = Planned(b.id, Task("t", {}, queue="q", expires=60), b.step, b.parents, b.inputs)
    write(s, a, b)
    s.advance(100)  # longer than b's deadline, counted from the workflow's write

    run(s, a)

    assert near(s.row(b.id)["run_at"], s.now())
    [claimed] = s.claim(b.id)
    assert claimed.late is not None and not claimed.expired
    assert claimed.waited < 5  # its wait, too, counts from when it was readied


def test_a_join_waits_for_its_last_parent_and_takes_their_results_in_order(
    s: StoreCase,
) -> None:
    parents = [step(f"p{i}") for i in range(3)]
    join = step(
        "join",
        {p.id: OnFailure.CANCEL for p in parents},
        {"parts": result_of(*parents)},
    )
    write(s, *parents, join)

    assert run(s, parents[2], result=2) == {parents[2].id: SUCCEEDED}
    assert run(s, parents[0], result=None) == {parents[0].id: SUCCEEDED}
    assert s.row(join.id)["state"] == WAITING
    assert run(s, parents[1], result="one") == {parents[1].id: SUCCEEDED, join.id: PENDING}
    assert s.row(join.id)["payload"] == {"parts": [None, "one", 2]}


def test_a_failed_parent_blocks_its_child_and_the_childs_children_with_the_reason(
    s: StoreCase,
) -> None:
    a, other = step("a"), step("other")
    b = step("b", {a.id: OnFailure.CANCEL, other.id: OnFailure.CANCEL})
    c = step("c", {b.id: OnFailure.CANCEL})
    write(s, a, other, b, c)

    written = run(s, a, FAILED)

    assert written == {a.id: FAILED, b.id: CANCELLED, c.id: CANCELLED}
    [blocked] = events(s, b)
    assert (blocked.move, blocked.to_state, blocked.by) == ("blocked", CANCELLED, "workflow")
    assert blocked.reason == f"parent a ({a.id}) failed: ValueError: boom"
    [cascaded] = events(s, c)
    assert cascaded.reason is not None and cascaded.reason.startswith(
        f"parent b ({b.id}) cancelled"
    )
    # The other parent's end finds its child ended: nothing changes.
    assert run(s, other) == {other.id: SUCCEEDED}
    assert s.row(b.id)["state"] == CANCELLED


def test_an_edge_that_asks_to_run_anyway_gives_the_child_its_parents_outcome(
    s: StoreCase,
) -> None:
    a = step("a")
    b = step("b", {a.id: OnFailure.RUN}, {"was": result_of(a, kind="outcome")})
    write(s, a, b)

    assert run(s, a, FAILED) == {a.id: FAILED, b.id: PENDING}
    assert s.row(b.id)["payload"] == {
        "was": {"state": "failed", "result": None, "reason": "ValueError: boom"}
    }


def test_an_edge_that_asks_to_skip_ends_the_child_skipped(s: StoreCase) -> None:
    a = step("a")
    b = step("b", {a.id: OnFailure.SKIP})
    write(s, a, b)

    assert run(s, a, FAILED) == {a.id: FAILED, b.id: CANCELLED}
    assert [e.move for e in events(s, b)] == ["skipped"]


def test_a_waiting_step_cancelled_by_hand_blocks_its_children(s: StoreCase) -> None:
    a = step("a")
    b = step("b", {a.id: OnFailure.CANCEL})
    c = step("c", {b.id: OnFailure.CANCEL})
    write(s, a, b, c)

    with contextlib.closing(s.app()) as app:
        assert s.store.cancel(app, b.id, by="tester") == CANCELLED
        app.commit()

    assert s.row(c.id)["state"] == CANCELLED
    # Its parent's end finds it cancelled: it stays so.
    assert run(s, a) == {a.id: SUCCEEDED}
    assert s.row(b.id)["state"] == CANCELLED


def test_a_workflow_cancelled_ends_its_waiting_and_pending_steps_and_stops_its_running_ones(
    s: StoreCase,
) -> None:
    a, other = step("a"), step("other")
    b = step("b", {a.id: OnFailure.CANCEL})
    c = step("c", {b.id: OnFailure.RUN})
    plan = write(s, a, other, b, c)
    [running] = s.claim(a.id)

    with contextlib.closing(s.app()) as app:
        written = s.store.cancel_workflow(app, plan.id, by="ops")
        app.commit()

    assert written == {a.id: "running", other.id: CANCELLED, b.id: CANCELLED, c.id: CANCELLED}
    assert [e.move for e in events(s, b)] == ["cancel"]
    assert s.row(a.id)["cancel_requested"]
    # The running step's end changes none of the others; a second cancel finds nothing.
    assert finish(s, running, SUCCEEDED) == {a.id: SUCCEEDED}
    with contextlib.closing(s.app()) as app:
        assert s.store.cancel_workflow(app, plan.id) == {}
        app.commit()


def test_the_cleaner_moves_on_a_step_whose_parent_ended_without_seeing_to_it(
    s: StoreCase,
) -> None:
    a, failed = step("a"), step("failed")
    b = step("b", {a.id: OnFailure.CANCEL}, {"x": result_of(a)})
    c = step("c", {failed.id: OnFailure.CANCEL})
    write(s, a, failed, b, c)
    # Ended as a worker of a release before workflows ends them: the edges left behind.
    s.execute(
        "UPDATE txqueue_tasks SET state = 'succeeded', result = '7' WHERE id = %s", (str(a.id),)
    )
    s.execute("UPDATE txqueue_tasks SET state = 'failed' WHERE id = %s", (str(failed.id),))

    applied = s.store.release_stranded(s.conn, 10)

    assert applied == {b.id: PENDING, c.id: CANCELLED}
    assert [(q, r.id) for q, r in applied.ready] == [("q", b.id)]
    assert s.row(b.id)["payload"] == {"x": 7}
    assert [e.move for e in events(s, c)] == ["blocked"]
    assert s.store.release_stranded(s.conn, 10) == {}


def test_a_retry_by_hand_of_a_failed_step_rearms_what_its_failure_blocked(s: StoreCase) -> None:
    a, other = step("a"), step("other")
    b = step("b", {a.id: OnFailure.CANCEL}, {"x": result_of(a)})
    c = step("c", {b.id: OnFailure.SKIP})
    stuck = step("stuck", {a.id: OnFailure.CANCEL, other.id: OnFailure.CANCEL})
    write(s, a, other, b, c, stuck)
    run(s, other, FAILED)  # blocks stuck for good
    run(s, a, FAILED)  # blocks b, which skips c
    assert [s.row(x.id)["state"] for x in (b, c, stuck)] == [CANCELLED] * 3

    with contextlib.closing(s.app()) as app:
        # The retry rearms what a's failure blocked, in the same transaction.
        assert [m.id for m in s.store.retry_ids(app, [a.id], by="ops")] == [a.id]
        app.commit()

    assert [s.row(x.id)["state"] for x in (b, c, stuck)] == [WAITING, WAITING, CANCELLED]
    assert [(e.move, e.by) for e in events(s, b)][-1] == ("rearmed", "ops")
    [claimed] = s.claim(a.id, with_=defaults(max_attempts=2))
    assert finish(s, claimed, SUCCEEDED, result="5") == {a.id: SUCCEEDED, b.id: PENDING}
    assert s.row(b.id)["payload"] == {"x": 5}
    assert run(s, b) == {b.id: SUCCEEDED, c.id: PENDING}


def test_a_step_is_not_retried_by_hand_while_its_parents_hold_it_back(s: StoreCase) -> None:
    # Found by the model test: a blocked step retried by hand ran though its parent had
    # failed, and one cancelled while waiting ran before its parent.
    a, b = step("a"), step("b")
    blocked = step("blocked", {a.id: OnFailure.CANCEL})
    waiting = step("waiting", {b.id: OnFailure.RUN})
    write(s, a, b, blocked, waiting)
    run(s, a, FAILED)
    with contextlib.closing(s.app()) as app:
        assert s.store.cancel(app, waiting.id, by="ops") == CANCELLED
        app.commit()

    with contextlib.closing(s.app()) as app:
        assert s.store.retry_ids(app, [blocked.id, waiting.id], by="ops") == []
        app.commit()
    assert [s.row(x.id)["state"] for x in (blocked, waiting)] == [CANCELLED, CANCELLED]

    run(s, b, FAILED)  # its edge runs however b ends: the step may run again
    with contextlib.closing(s.app()) as app:
        assert [m.id for m in s.store.retry_ids(app, [waiting.id], by="ops")] == [waiting.id]
        app.commit()
    assert s.row(waiting.id)["state"] == PENDING


def test_a_workflow_cancelled_after_a_retry_rearmed_it_ends_every_step(s: StoreCase) -> None:
    a = step("a")
    b = step("b", {a.id: OnFailure.CANCEL}, {"x": result_of(a)})
    plan = write(s, a, b)
    run(s, a, FAILED)
    with contextlib.closing(s.app()) as app:
        s.store.retry_ids(app, [a.id])
        app.commit()
    assert s.row(b.id)["state"] == WAITING

    # The retried step and the one it re-armed end in one write: the second's inputs are
    # not gathered for a step that is no longer waiting.
    with contextlib.closing(s.app()) as app:
        assert s.store.cancel_workflow(app, plan.id) == {a.id: CANCELLED, b.id: CANCELLED}
        app.commit()
