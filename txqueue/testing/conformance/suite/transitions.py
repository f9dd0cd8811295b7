"""apply: every legal move of ``lifecycle.MOVES`` writes its state and records its event, and
a transition fenced on what the task is not writes nothing, in every state. Parametrized
over the table, so a new move or state is tested here as soon as it is in it. The paths
the worker and the cleaner take through these moves are in test_history.py."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from ....core import lifecycle
from ....core.lifecycle import MOVES, Fence, Move, Transition
from ....core.stored import Event
from ....core.task import (
    CANCELLED,
    FAILED,
    PARKED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    WAITING,
    Task,
    TaskState,
)
from ....store.records import Inserted
from ....workflows.readiness import OnFailure
from ..case import StoreCase, defaults, finish
from .workflows import step, write

LEGAL = [(f, to) for f, targets in MOVES.items() for to in sorted(targets)]

# The move each change is made by in txqueue; the store records whatever it is told, so a
# change not named here is applied as a retry by hand.
NAMED = {
    (PENDING, RUNNING): Move.CLAIMED,
    (PENDING, CANCELLED): Move.CANCEL,
    (RUNNING, SUCCEEDED): Move.SUCCEEDED,
    (RUNNING, FAILED): Move.FAILED,
    (RUNNING, CANCELLED): Move.CANCELLED,
    (RUNNING, PENDING): Move.RETRIED,
    (RUNNING, RUNNING): Move.RELEASED,
    (WAITING, PENDING): Move.READIED,
    (WAITING, CANCELLED): Move.BLOCKED,
    (CANCELLED, WAITING): Move.REARMED,
    (RUNNING, PARKED): Move.PARKED,
    (PARKED, PENDING): Move.WOKEN,
    (PARKED, CANCELLED): Move.CANCEL,
}


def put_in(s: StoreCase, state: TaskState) -> uuid.UUID:
    """A committed task in ``state``, the way txqueue puts it there."""
    if state == WAITING:  # a workflow's step whose parent has not ended
        parent = step("parent")
        child = step("child", {parent.id: OnFailure.CANCEL})
        write(s, parent, child)
        return child.id
    task_id = s.enqueue()
    if state == PENDING:
        return task_id
    [claimed] = s.claim(task_id, with_=defaults(max_attempts=1))
    if state != RUNNING:
        error = "ValueError" if state == FAILED else None
        assert finish(s, claimed, state, error=error) == {task_id: state}
    return task_id


def fence_of(row: dict[str, Any]) -> Fence:
    """The fence a task's row passes: its state, attempt and worker."""
    return Fence(TaskState(row["state"]), row["attempts"], row["worker_id"])


@pytest.mark.parametrize(("was", "to"), LEGAL)
def test_each_legal_move_writes_its_state_and_records_its_event(
    s: StoreCase, was: TaskState, to: TaskState
) -> None:
    task_id = put_in(s, was)
    before = s.row(task_id)
    move = NAMED.get((was, to), Move.RETRY)

    # Any move may enqueue a task (the store's, not its caller's, to honour): in its write.
    comp = Task("undo", {"of": str(task_id)}, queue="comp")
    t = Transition(task_id, move, fence_of(before), to, "tester", enqueues=(comp,))
    applied = s.store.apply(s.conn, [t])
    assert applied == {task_id: to}
    [enqueued] = s.rows("name = 'undo'")
    assert (enqueued["queue"], enqueued["state"]) == ("comp", PENDING)
    inserted = Inserted(uuid.UUID(str(enqueued["id"])), True, applied.enqueued[task_id][1].xid)
    assert applied.enqueued == {task_id: ("comp", inserted)}
    assert ("comp", inserted) in applied.ready

    after = s.row(task_id)
    assert after["state"] == to
    assert (after["finished_at"] is not None) == lifecycle.finished(to)
    assert after["attempts"] == before["attempts"]
    assert after["events"][: len(before["events"])] == before["events"]
    [added] = after["events"][len(before["events"]) :]
    event = Event.of_json(added)
    assert (event.move, event.attempt, event.from_state, event.to_state, event.by) == (
        move,
        before["attempts"],
        was,
        to,
        "tester",
    )


def wrong_fences(row: dict[str, Any]) -> list[Fence]:
    """Every fence ``row`` fails, with a legal move: each other state, and its own state at
    another attempt or held by another worker."""
    state, attempt, worker = TaskState(row["state"]), row["attempts"], row["worker_id"]
    others = [Fence(f) for f in TaskState if f != state and MOVES[f]]
    if not MOVES[state]:
        return others
    return [
        *others,
        Fence(state, attempt + 1, worker),
        Fence(state, attempt, "someone else"),
    ]


@pytest.mark.parametrize("state", list(TaskState))
def test_a_transition_fenced_on_what_the_task_is_not_writes_nothing(
    s: StoreCase, state: TaskState
) -> None:
    task_id = put_in(s, state)
    before = s.row(task_id)

    for fence in wrong_fences(before):
        to = sorted(MOVES[fence.state])[0]
        move = NAMED.get((fence.state, to), Move.RETRY)
        t = Transition(task_id, move, fence, to, "tester", enqueues=(Task("undo", {}),))
        applied = s.store.apply(s.conn, [t])
        assert (applied, applied.ready, applied.enqueued) == ({}, [], {}), fence

    assert s.row(task_id) == before
    assert s.rows("name = 'undo'") == []  # a move fenced out enqueues nothing
