"""Workflows: writing one in the caller's transaction (its row, its steps, its edges)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import psycopg

from ..records import Inserted, Planned, WorkflowPlan
from .connection import QUERIES, Caller, errors
from .enqueue import copy_row

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


class Workflows:
    """Writing a workflow in the caller's transaction: its row, its steps, its edges."""

    def insert_workflow(
        self, conn: Caller, plan: WorkflowPlan, trace: str | None = None
    ) -> list[Inserted]:
        """Write ``plan`` in the caller's transaction, all of it or none: its steps without
        parents ready to run, the others waiting. Each step's Inserted, in order."""
        copier = conn if isinstance(conn, psycopg.Connection) else None
        if copier is not None and copier.pgconn.pipeline_status:
            copier = None
        if any(p.task.run_at is not None or p.task.delay is not None for p in plan.steps):
            copier = None
        block: AbstractContextManager[object] = nullcontext()
        if conn.autocommit:
            block = conn.transaction()  # all or nothing, and one xid for the wake-ups
        with errors("enqueue_workflow"), block:
            params = {"id": plan.id, "name": plan.name, "steps": len(plan.steps)}
            row = conn.execute(QUERIES["insert_workflow"], params).fetchone()
            assert row is not None
            slot, xid = row
            rows = [_step_row(p, slot, trace, plan.id) for p in plan.steps]
            waits = [
                (parent, p.id, plan.id, policy)
                for p in plan.steps
                for parent, policy in p.parents.items()
            ]
            if copier is not None:
                with copier.cursor() as cursor:
                    with cursor.copy(QUERIES["copy_steps"]) as copy:
                        for r in rows:
                            copy.write_row(r)
                    if waits:
                        with cursor.copy(QUERIES["copy_waits"]) as copy:
                            for w in waits:
                                copy.write_row(w)
            else:
                self._insert_steps(conn, plan, rows, waits, trace)
        return [Inserted(p.id, True, xid) for p in plan.steps]

    def _insert_steps(
        self,
        conn: Caller,
        plan: WorkflowPlan,
        rows: Sequence[tuple[Any, ...]],
        waits: Sequence[tuple[Any, ...]],
        trace: str | None,
    ) -> None:
        tasks = [p.task for p in plan.steps]
        params = {
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
            "step": [r[10] for r in rows],
            "parents": [r[11] for r in rows],
            "inputs": [r[12] for r in rows],
            "state": [r[13] for r in rows],
            "slot": [r[14] for r in rows],
            "trace_context": trace,
            "workflow_id": plan.id,
        }
        conn.execute(QUERIES["insert_steps"], params)
        if waits:
            conn.execute(
                QUERIES["insert_waits"],
                {
                    "workflow_id": plan.id,
                    "parent": [w[0] for w in waits],
                    "child": [w[1] for w in waits],
                    "on_failure": [w[3] for w in waits],
                },
            )
