"""Writing a declared workflow: ``enqueue_workflow`` (and its asyncio twin) inserts every
step in the caller's transaction, or none, and wakes the steps without parents."""

from __future__ import annotations

import uuid
from typing import Any

from ..errors import InvalidTypeError
from ..observability import tracing
from ..outbox.client import Delivery, notify, wakeups_for, waking
from ..store.bound import AsyncBound, Bound
from ..store.connections import bind, bind_async
from ..store.plans import Plan, call, run, run_async
from ..store.protocols import Enqueue, InTransaction
from ..store.records import Inserted, WorkflowPlan
from .workflow import Workflow


def check_workflow(flow: object) -> Workflow:
    if not isinstance(flow, Workflow):
        raise InvalidTypeError("workflow", f"must be a txqueue.Workflow, not {type(flow).__name__}")
    return flow


def enqueue_workflow(conn: object, workflow: Workflow) -> uuid.UUID:
    """Write every step of ``workflow`` in the caller's transaction on ``conn``, or none,
    and return the workflow's id. As ``enqueue``: it exists if and only if that
    transaction commits, and txqueue never commits for the caller. The steps without
    parents are woken at once; each other step waits, and is readied in the transaction
    that ends its last parent.

    Example:

    ```python
    flow = txqueue.Workflow("receipts")
    receipts = [flow.step(send_receipt, n) for n in (1, 2, 3)]  # a group
    workflow_id = txqueue.enqueue_workflow(conn, flow)
    ```
    """
    return enqueue_workflow_by(conn, workflow)


def enqueue_workflow_by(
    conn: object,
    workflow: Workflow,
    store: InTransaction[Any] | None = None,
    delivery: Delivery | None = None,
) -> uuid.UUID:
    """``enqueue_workflow`` with a configuration's own store and Delivery (None: the
    defaults)."""
    plan = check_workflow(workflow).plan()
    bound = bind(conn, store)
    return run(writing(bound, plan, delivery), bound)


async def enqueue_workflow_async(conn: object, workflow: Workflow) -> uuid.UUID:
    """``enqueue_workflow`` on an asyncio connection.

    Example:

    ```python
    flow = txqueue.Workflow("receipts")
    flow.step(send_receipt, 1)
    workflow_id = await txqueue.enqueue_workflow_async(conn, flow)
    ```
    """
    return await enqueue_workflow_async_by(conn, workflow)


async def enqueue_workflow_async_by(
    conn: object,
    workflow: Workflow,
    store: InTransaction[Any] | None = None,
    delivery: Delivery | None = None,
) -> uuid.UUID:
    """``enqueue_workflow_async`` with a configuration's own store and Delivery."""
    plan = check_workflow(workflow).plan()
    bound = await bind_async(conn, store)
    return await run_async(writing(bound, plan, delivery), bound)


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
