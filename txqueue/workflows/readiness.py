"""When a workflow's step may run: what the ends of its parents make of it.

A step with parents starts ``waiting``. When a parent ends, ``after_parents`` decides in
the same transaction what becomes of each of its children: ``pending`` once none of its
parents is left (``readied``, their results in its arguments), or ``cancelled`` at once if
the parent failed or was cancelled and the edge's ``OnFailure`` says so (``blocked`` or
``skipped``), which its own children then meet in turn. A retry by hand of a failed step
sets what its failure blocked waiting again (``rearmed``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from ..core.lifecycle import Fence, Move, Transition, finished
from ..core.task import CANCELLED, PENDING, SUCCEEDED, WAITING, TaskState


class OnFailure(StrEnum):
    """What a workflow's step does when one of its parents fails or is cancelled; set on
    each edge (``Workflow``).

    Example:

    ```python
    flow = txqueue.Workflow("order")
    paid = flow.step(charge, 42)
    flow.step(send_receipt, 42).after(paid, on_failure=txqueue.OnFailure.SKIP)  # or "skip"
    workflow_id = txqueue.enqueue_workflow(conn, flow)
    ```
    """

    CANCEL = "cancel"  # it never runs: it ends cancelled, ``blocked``, the parent named
    RUN = "run"  # it runs once its other parents have ended, given the parent's Outcome
    SKIP = "skip"  # it never runs: it ends cancelled, ``skipped`` (not a failure)


WORKFLOW: Final = "workflow"
"""Who readies or ends a step for its parents, as its history says."""


@dataclass(frozen=True, slots=True)
class Parent:
    """A step that ended in the transaction deciding its children: how, and why."""

    state: str
    step: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class Child:
    """A step one of whose parents just ended, read under its lock: its state, whether a
    parent of it has not ended yet, the edges from the parents just ended (each with its
    ``OnFailure``), and, when no parent is left, its inputs (JSON text: its arguments
    that are its parents' results)."""

    id: uuid.UUID
    state: TaskState
    waits: bool
    freed: tuple[tuple[uuid.UUID, str], ...]
    inputs: str | None = None


def rearmed(
    retried: set[uuid.UUID], steps: Mapping[uuid.UUID, tuple[str, str | None, Mapping[str, str]]]
) -> set[uuid.UUID]:
    """The steps a retry by hand of ``retried`` sets waiting again: those it had blocked
    or skipped (``steps``: each step's state, last move and parents with their edges'
    OnFailure), down the graph, unless another parent's end still blocks them (failed
    or cancelled, not retried, by an edge that does not run anyway)."""

    def clear(parent: uuid.UUID, policy: str) -> bool:
        if parent in again:
            return True
        state = steps[parent][0] if parent in steps else None
        return state == SUCCEEDED or not finished(state or "") or policy == OnFailure.RUN

    again = set(retried)
    out: set[uuid.UUID] = set()
    grew = True
    while grew:
        grew = False
        for step_id, (state, move, parents) in steps.items():
            if step_id in again or state != CANCELLED or move not in (Move.BLOCKED, Move.SKIPPED):
                continue
            ids = {uuid.UUID(p): policy for p, policy in parents.items()}
            if any(p in again for p in ids) and all(clear(p, on) for p, on in ids.items()):
                again.add(step_id)
                out.add(step_id)
                grew = True
    return out


def after_parents(child: Child, ended: Mapping[uuid.UUID, Parent]) -> Transition | None:
    """What becomes of a step when some of its parents have ended: cancelled at once for
    a parent that failed or was cancelled, by the edge's ``OnFailure`` (unless it says
    run); else readied when none is left; else nothing yet. A step no longer waiting
    (cancelled by hand, or by another parent) is left as it is."""
    if child.state != WAITING:
        return None
    for parent_id, policy in child.freed:
        parent = ended[parent_id]
        if parent.state == SUCCEEDED or policy == OnFailure.RUN:
            continue
        move = Move.SKIPPED if policy == OnFailure.SKIP else Move.BLOCKED
        note = f"parent {parent.step} ({parent_id}) {parent.state}"
        if parent.reason:
            note += f": {parent.reason}"
        return Transition(child.id, move, Fence(WAITING), CANCELLED, WORKFLOW, note=note)
    if child.waits:
        return None
    return Transition(
        child.id,
        Move.READIED,
        Fence(WAITING),
        PENDING,
        WORKFLOW,
        inputs=child.inputs,
        run_in=0.0,
    )
