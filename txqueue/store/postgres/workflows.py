"""Workflows: writing one in the caller's transaction (its row, its steps, its edges), and
the reads that follow a step's end (its edges, its children, its parents' results)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import psycopg

from ...core.task import TaskState
from ...workflows.graph import WorkflowInfo, workflow_of
from ...workflows.readiness import Parent
from ..records import Inserted, Planned, WorkflowPlan
from ..transitions import Child, Values
from .connection import QUERIES, Caller, PgConnection, errors
from .enqueue import copy_row, notes

WAITING_SLOT = -3
"""Where a step with parents waits (schema.sql, migration 11): a slot never reclaimed."""


def _step_row(p: Planned, slot: int, trace: str | None, workflow_id: uuid.UUID) -> tuple[Any, ...]:
    """The columns of ``copy_steps`` for step ``p``."""
    return (
        *copy_row(p.id, p.task, trace),
        workflow_id,
        p.step,
        json.dumps(p.parents) if p.parents else None,
        json.dumps(p.inputs) if p.inputs else None,
        "waiting" if p.parents else "pending",
        WAITING_SLOT if p.parents else slot,
    )


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
    rows = [_step_row(p, slot, trace, plan.id) for p in plan.steps]
    tasks = [p.task for p in plan.steps]
    return {
        "id": [r[0] for r in rows],
        "queue": [t.queue for t in tasks],
        "name": [t.name for t in tasks],
        "payload": [t.payload_json for t in tasks],
        "priority": [t.priority for t in tasks],
        "run_at": [t.run_at for t in tasks],
        "delay": [t.delay_seconds for t in tasks],
        "max_attempts": [t.max_attempts for t in tasks],
        "timeout": [t.timeout for t in tasks],
        "concurrency_key": [t.concurrency_key for t in tasks],
        "start_by": [t.start_by for t in tasks],
        "expires_in": [t.expires_seconds for t in tasks],
        "time_limit": [t.time_limit for t in tasks],
        "step": [r[-5] for r in rows],
        "parents": [r[-4] for r in rows],
        "inputs": [r[-3] for r in rows],
        "state": [r[-2] for r in rows],
        "slot": [r[-1] for r in rows],
        "trace_context": trace,
        "workflow_id": plan.id,
    }


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
