"""Writing a declared workflow (``writing``, the plan of ``enqueue_workflow`` and its
asyncio form): every step in the caller's transaction, or none, and a wake-up for each
step without parents."""

from __future__ import annotations

import uuid
from typing import Any

from ..errors import InvalidTypeError
from ..observability import tracing
from ..outbox.client import Delivery, notify, wakeups_for, waking
from ..store.bound import AsyncBound, Bound
from ..store.plans import Plan, call
from ..store.protocols import Enqueue
from ..store.records import Inserted, WorkflowPlan
from .workflow import Workflow


def check_workflow(flow: object) -> Workflow:
    if not isinstance(flow, Workflow):
        raise InvalidTypeError("workflow", f"must be a txqueue.Workflow, not {type(flow).__name__}")
    return flow


def writing(
    bound: Bound[Any] | AsyncBound, plan: WorkflowPlan, delivery: Delivery | None
) -> Plan[uuid.UUID]:
    """Insert the workflow's steps in the caller's transaction, then wake those without
    parents; its id."""
    by_notify = notify(bound, delivery)
    with tracing.sending([p.task for p in plan.steps]) as trace:
        inserted = yield call(Enqueue.insert_workflow, plan, trace, by_notify)
    yield from waking(bound, _wakeups(plan, inserted), delivery, by_notify)
    return plan.id


def _wakeups(plan: WorkflowPlan, inserted: list[Inserted]) -> list[tuple[str, bytes]]:
    """The wake-ups of the steps ready at once: those without parents."""
    ready = [(p.task, row) for p, row in zip(plan.steps, inserted, strict=True) if not p.parents]
    return wakeups_for([task for task, _ in ready], [row for _, row in ready])
