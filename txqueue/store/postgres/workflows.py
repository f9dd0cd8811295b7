"""Workflows: writing one in the caller's transaction (its row, its steps, its edges), and
the reads that follow a step's end (its edges, its children, its parents' results)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import psycopg

from ...core.task import TaskState
from ...workflows.graph import WorkflowInfo, workflow_of
from ...workflows.readiness import Parent
from ..columns import STEP, STEP_TASK, arrays, copied, maker, per_row
from ..records import Inserted, Planned, WorkflowPlan
from ..transitions import Child, Values
from .connection import QUERIES, Caller, PgConnection, errors
from .enqueue import notes

WAITING_SLOT = -3
"""Where a step with parents waits (schema.sql, migration 11): a slot never reclaimed."""


_STEP_PARAMS = maker(("obj.task", STEP_TASK), ("obj", STEP), into="dict")
_STEP_COPY = maker(("obj.task", copied(STEP_TASK)), ("obj", STEP), into="tuple", extra=["slot"])
_ARRAYS = per_row(STEP_TASK + STEP)


def _slot(p: Planned, slot: int) -> int:
    return WAITING_SLOT if p.parents else slot


def _step_row(p: Planned, slot: int, trace: str | None, workflow_id: uuid.UUID) -> tuple[Any, ...]:
    """The columns of ``copy_steps`` for step ``p``."""
    row: tuple[Any, ...] = _STEP_COPY(p, p.id, trace, workflow_id, _slot(p, slot))
    return row


def workflow_params(plan: WorkflowPlan, notify: bool) -> dict[str, Any]:
    """The parameters of ``insert_workflow``: with the wake-ups of its first steps, if
    the caller ``notify``s."""
    first = [p.task for p in plan.steps if not p.parents]
    return {
        "id": plan.id,
        "name": plan.name,
        "steps": len(plan.steps),
        "notes": notes(first, notify),
    }


def steps_params(plan: WorkflowPlan, slot: int, trace: str | None) -> dict[str, Any]:
    """The parameters of ``insert_steps`` (the asyncio store's too)."""
    rows = [_STEP_PARAMS(p, p.id, trace, plan.id) for p in plan.steps]
    params: dict[str, Any] = arrays(_ARRAYS, rows)
    params["slot"] = [_slot(p, slot) for p in plan.steps]
    params["trace_context"] = trace
    params["workflow_id"] = plan.id
    return params


def _copyable(conn: Caller, plan: WorkflowPlan) -> psycopg.Connection[Any] | None:
    """``conn`` if COPY can write the steps: psycopg's, outside a pipeline, and no step
    with a time of its own to work out."""
    if not isinstance(conn, psycopg.Connection) or conn.pgconn.pipeline_status:
        return None
    if any(p.task.run_at is not None or p.task.delay is not None for p in plan.steps):
        return None
    return conn


def children_of(rows: Iterable[Sequence[Any]]) -> tuple[list[Child], Values]:
    """The rows of ``children``: the children, and the parents (``waits`` NULL) their
    inputs take results from."""
    children: list[Child] = []
    values: Values = {}
    for i, state, waits, spec, result, reason in rows:
        if waits is None:
            values[i] = (state, result, reason)
        else:
            children.append((uuid.UUID(i), TaskState(state), waits, spec))
    return children, values


def rewait_params(edges: Sequence[tuple[uuid.UUID, uuid.UUID, str]]) -> dict[str, Any]:
    """The parameters of ``rewait`` (the asyncio store's too)."""
    return {
        "parent": [p for p, _, _ in edges],
        "child": [c for _, c, _ in edges],
        "on_failure": [on for _, _, on in edges],
    }


class Workflows:
    """Writing a workflow in the caller's transaction: its row, its steps, its edges."""

    def insert_workflow(
        self, conn: Caller, plan: WorkflowPlan, trace: str | None = None, notify: bool = False
    ) -> list[Inserted]:
        """Write ``plan`` in the caller's transaction, all of it or none: its steps without
        parents ready to run, the others waiting. Each step's Inserted, in order.
        ``notify``: as ``insert_task``'s."""
        copier = _copyable(conn, plan)
        block: AbstractContextManager[object] = nullcontext()
        if conn.autocommit:
            block = conn.transaction()  # all or nothing, and one xid for the wake-ups
        with errors("enqueue_workflow"), block:
            row = conn.execute(QUERIES["insert_workflow"], workflow_params(plan, notify)).fetchone()
            assert row is not None
            slot, xid, _ = row
            if copier is None:
                conn.execute(QUERIES["insert_steps"], steps_params(plan, slot, trace))
            else:
                with copier.cursor() as cursor, cursor.copy(QUERIES["copy_steps"]) as copy:
                    for p in plan.steps:
                        copy.write_row(_step_row(p, slot, trace, plan.id))
            if any(p.parents for p in plan.steps):
                conn.execute(QUERIES["insert_waits"], {"workflow_id": plan.id})
        return [Inserted(p.id, True, xid) for p in plan.steps]

    def get_workflow(self, conn: Caller, workflow_id: uuid.UUID) -> WorkflowInfo | None:
        """The workflow and its steps, or None if there is no such workflow."""
        with errors("show workflow"):
            head = conn.execute(QUERIES["get_workflow"], (workflow_id,)).fetchone()
            if head is None:
                return None
            steps = conn.execute(QUERIES["workflow_steps"], (workflow_id,)).fetchall()
        return workflow_of(workflow_id, head[0], head[1], steps)

    def _stranded(self, conn: PgConnection, limit: int) -> dict[uuid.UUID, Parent]:
        rows = conn.execute(QUERIES["stranded"], {"limit": limit}).fetchall()
        return {i: Parent(state, step, why) for i, state, step, why in rows}

    def prune_workflows(self, conn: PgConnection, age: float) -> int:
        """Delete the workflows older than ``age`` seconds whose steps were all pruned."""
        with errors("prune"):
            return conn.execute(QUERIES["prune_workflows"], {"age": age}).rowcount

    def _rewait(self, conn: Caller, edges: Sequence[tuple[uuid.UUID, uuid.UUID, str]]) -> None:
        conn.execute(QUERIES["rewait"], rewait_params(edges))

    def _free_waits(
        self, conn: Caller, parents: Sequence[uuid.UUID]
    ) -> list[tuple[uuid.UUID, uuid.UUID, str]]:
        rows = conn.execute(QUERIES["free_waits"], {"ids": parents}).fetchall()
        return [(child, parent, policy) for child, parent, policy in rows]

    def _children(self, conn: Caller, ids: Sequence[uuid.UUID]) -> tuple[list[Child], Values]:
        return children_of(conn.execute(QUERIES["children"], {"ids": ids}).fetchall())
