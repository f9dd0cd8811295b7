"""A workflow as stored: each step's state, and the workflow's, as ``get_workflow``
returns them; a workflow as ``list_workflows`` lists it, and which ones it lists."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ..core.fields import check_states
from ..core.lifecycle import FINISHED, Move
from ..core.task import CANCELLED, FAILED, TaskState
from ..core.times import iso, iso_or_none
from ..errors import InvalidValueError

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


def flow_code_state(code: int) -> str:
    """A workflow's state from its code, as the stores' ``list_workflows`` computes it from
    its steps: 4 if a step has not ended, plus 2 if one failed, plus 1 if one was
    cancelled (not skipped)."""
    return flow_state(bool(code & 4), bool(code & 2), bool(code & 1))


def state_codes(states: Iterable[str]) -> list[int]:
    """The codes (``flow_code_state``) of the workflows in one of ``states``: a search by
    state asks the store for these, so that which steps make which state is decided here
    alone."""
    wanted = set(states)
    return [code for code in range(8) if flow_code_state(code) in wanted]


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


@dataclass(frozen=True, slots=True)
class WorkflowSummary:
    """A workflow as ``list_workflows`` lists it: its ``state`` (as ``WorkflowInfo.state``),
    how many of its steps are in each task state (``steps``, every state, 0 included),
    when it was created, and when its last step ended (None while one has not).

    Example:

    ```python
    flow = txqueue.Workflow("receipts")
    flow.step(send_receipt, 1)
    txqueue.enqueue_workflow(conn, flow)
    [summary] = txqueue.list_workflows(conn, name="receipts")
    print(summary.state, summary.steps["pending"], summary.finished_at)  # running 1 None
    ```
    """

    id: uuid.UUID
    name: str
    state: str
    steps: Mapping[str, int]
    created_at: datetime
    finished_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "name": self.name,
            "state": self.state,
            "steps": dict(self.steps),
            "created_at": iso(self.created_at),
            "finished_at": iso_or_none(self.finished_at),
        }


@dataclass(frozen=True, slots=True)
class WorkflowSearch:
    """The workflows a ``list_workflows`` takes (each None: any): in one of ``states``,
    named ``name``, created from ``created_after`` (included) to ``created_before`` (not).
    ``workflow_search`` makes one of a caller's arguments, checked."""

    states: tuple[str, ...] | None = None
    name: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


def workflow_search(
    state: str | Sequence[str] | None,
    name: str | None,
    created_after: datetime | None,
    created_before: datetime | None,
) -> WorkflowSearch:
    """A WorkflowSearch of ``list_workflows``' arguments; InvalidValueError naming the
    first that is not one it takes (``state``: one of FLOW_STATES, or a list of them)."""
    states = check_states(state, FLOW_STATES)
    if name is not None and not (isinstance(name, str) and name.strip()):
        raise InvalidValueError("name", f"must be a non-empty str, got {name!r}")
    times = {"created_after": created_after, "created_before": created_before}
    for field, when in times.items():
        if when is not None and (not isinstance(when, datetime) or when.tzinfo is None):
            raise InvalidValueError(field, f"must be an aware datetime, got {when!r}")
    return WorkflowSearch(states, name, created_after, created_before)
