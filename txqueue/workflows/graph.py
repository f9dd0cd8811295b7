"""A workflow as stored: each step's state, and the workflow's, as ``get_workflow``
returns them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ..core.lifecycle import FINISHED, Move
from ..core.task import CANCELLED, FAILED, TaskState
from ..core.times import iso, iso_or_none

RUNNING_FLOW = "running"


@dataclass(frozen=True, slots=True)
class StepInfo:
    """A step of a stored workflow: its name in the workflow, its task's name and queue,
    its state, its parents' ids, and, once it has ended, its result or why it did not
    succeed (``move``: how it ended when its parents ended it, ``blocked`` or
    ``skipped``).

    Example:

    ```python
    flow = txqueue.Workflow("receipts")
    flow.step(send_receipt, 1)
    workflow_id = txqueue.enqueue_workflow(conn, flow)
    for step in txqueue.get_workflow(conn, workflow_id).steps:
        print(step.step, step.name, step.state, step.parents, step.result)
    ```
    """

    id: uuid.UUID
    step: str
    name: str
    queue: str
    state: TaskState
    parents: tuple[uuid.UUID, ...]
    attempts: int
    result: Any
    reason: str | None
    move: str | None
    finished_at: datetime | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", TaskState(self.state))

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "step": self.step,
            "name": self.name,
            "queue": self.queue,
            "state": str(self.state),
            "parents": [str(p) for p in self.parents],
            "attempts": self.attempts,
            "result": self.result,
            "reason": self.reason,
            "move": self.move,
            "finished_at": iso_or_none(self.finished_at),
        }


def flow_state(running: bool, failed: bool, cancelled: bool) -> str:
    """A workflow's state from its steps': whether one has not ended, one failed, one was
    cancelled (not skipped)."""
    if running:
        return RUNNING_FLOW
    if failed:
        return str(FAILED)
    return str(CANCELLED) if cancelled else "succeeded"


FLOW_STATES: Final = (RUNNING_FLOW, "succeeded", str(FAILED), str(CANCELLED))


@dataclass(frozen=True, slots=True)
class WorkflowInfo:
    """A stored workflow and its steps, in the order they were declared.

    Example:

    ```python
    flow = txqueue.Workflow("receipts")
    first = flow.step(send_receipt, 1)
    flow.step(send_receipt, 2).after(first)
    info = txqueue.get_workflow(conn, txqueue.enqueue_workflow(conn, flow))
    print(info.name, info.state, [step.step for step in info.steps])
    # receipts running ['send_receipt', 'send_receipt#2']
    ```
    """

    id: uuid.UUID
    name: str
    created_at: datetime
    steps: tuple[StepInfo, ...]

    @property
    def state(self) -> str:
        """``running`` while a step has not ended; then ``failed`` if one failed (its
        children blocked with it), ``cancelled`` if one was cancelled, else
        ``succeeded`` (skipped steps count as neither)."""
        return flow_state(
            any(s.state not in FINISHED for s in self.steps),
            any(s.state == FAILED for s in self.steps),
            any(s.state == CANCELLED and s.move != Move.SKIPPED for s in self.steps),
        )

    @property
    def finals(self) -> tuple[StepInfo, ...]:
        """The steps no other step waits for: the workflow's ends."""
        parents = {p for s in self.steps for p in s.parents}
        return tuple(s for s in self.steps if s.id not in parents)

    @property
    def results(self) -> dict[str, Any]:
        """The result of each final step, by step name (None for one that did not
        succeed)."""
        return {s.step: s.result for s in self.finals}

    def step(self, name: str) -> StepInfo:
        """The step named ``name``; KeyError if there is none."""
        for s in self.steps:
            if s.step == name:
                return s
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "name": self.name,
            "state": self.state,
            "created_at": iso(self.created_at),
            "results": self.results,
            "steps": [s.as_dict() for s in self.steps],
        }


def workflow_of(
    wid: uuid.UUID, name: str, created_at: datetime, steps: Iterable[Sequence[Any]]
) -> WorkflowInfo:
    """A workflow from the stores' rows of its steps: (id, step, name, queue, state, parents
    as JSON text, attempts, result as JSON text, reason, move, finished_at)."""
    out = []
    for i, step, task, queue, state, parents, attempts, result, reason, move, at in steps:
        ids = tuple(uuid.UUID(p) for p in json.loads(parents)) if parents else ()
        value = None if result is None else json.loads(result)
        out.append(StepInfo(i, step, task, queue, state, ids, attempts, value, reason, move, at))
    return WorkflowInfo(wid, name, created_at, tuple(out))
