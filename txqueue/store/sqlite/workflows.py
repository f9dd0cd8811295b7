"""Workflows: writing one in the caller's transaction (its row, its steps, its edges), and
the reads that follow a step's end (its edges, its children, its parents' results)."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from typing import Any

from ...core.task import TaskState
from ...workflows.graph import WorkflowInfo, workflow_of
from ...workflows.readiness import Parent
from ..columns import STEP, STEP_TASK, maker
from ..records import Inserted, WorkflowPlan
from ..transitions import Child, Values
from .connection import QUERIES, Clock, _at, _ids, _time, errors

_STEP_ROW = maker(("obj.task", STEP_TASK), ("obj", STEP), into="tuple", seconds=True, extra=["now"])


def rows_of(
    plan: WorkflowPlan, trace: str | None, now: float
) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    """The parameters of ``insert_workflow``, and of ``insert_step`` for each step (the
    asyncio store's too)."""
    wid = str(plan.id)
    steps = [_STEP_ROW(p, str(p.id), trace, wid, now) for p in plan.steps]
    return (wid, plan.name, len(plan.steps), now), steps


def workflow_info(
    wid: uuid.UUID, head: Sequence[Any], steps: Sequence[Sequence[Any]]
) -> WorkflowInfo:
    """A workflow from its row (``get_workflow``) and its steps' (``workflow_steps``)."""
    rows = [(uuid.UUID(r[0]), *r[1:10], _time(r[10])) for r in steps]
    return workflow_of(wid, head[0], _at(head[1]), rows)


def children_of(rows: Sequence[Sequence[Any]]) -> tuple[list[Child], str | None]:
    """The rows of ``children``, and the parameter of ``step_results`` (a JSON array of
    ids) for the parents whose results the inputs of those no edge is left to take, or
    None if none does."""
    children = [(uuid.UUID(i), TaskState(state), bool(w), spec) for i, state, w, spec in rows]
    refs: set[str] = set()
    for _, state, waits, spec in children:
        if state == "waiting" and not waits and spec is not None:
            for ref in json.loads(spec).values():
                ids = ref["from"]
                refs.update(ids if isinstance(ids, list) else [ids])
    return children, json.dumps(sorted(refs)) if refs else None


def rewait_rows(edges: Sequence[tuple[uuid.UUID, uuid.UUID, str]]) -> list[tuple[str, str, str]]:
    """``rewait``'s parameters for each edge (the asyncio store's too)."""
    return [(str(parent), on, str(child)) for parent, child, on in edges]


class Workflows:
    clock: Clock

    def insert_workflow(
        self,
        conn: sqlite3.Connection,
        plan: WorkflowPlan,
        trace: str | None = None,
        notify: bool = False,
    ) -> list[Inserted]:
        """Write ``plan`` in the caller's transaction: its steps without parents ready to
        run, the others waiting. Each step's Inserted, in order."""
        workflow, steps = rows_of(plan, trace, self.clock.now())
        with errors("enqueue_workflow"):
            conn.execute(QUERIES["insert_workflow"], workflow)
            conn.executemany(QUERIES["insert_step"], steps)
            conn.execute(QUERIES["insert_waits"], (workflow[0],))
        return [Inserted(p.id, True) for p in plan.steps]

    def get_workflow(self, conn: sqlite3.Connection, workflow_id: uuid.UUID) -> WorkflowInfo | None:
        """The workflow and its steps, or None if there is no such workflow."""
        with errors("show workflow"):
            head = conn.execute(QUERIES["get_workflow"], (str(workflow_id),)).fetchone()
            if head is None:
                return None
            steps = conn.execute(QUERIES["workflow_steps"], (str(workflow_id),)).fetchall()
        return workflow_info(workflow_id, head, steps)

    def _stranded(self, conn: sqlite3.Connection, limit: int) -> dict[uuid.UUID, Parent]:
        rows = conn.execute(QUERIES["stranded"], {"limit": limit}).fetchall()
        return {uuid.UUID(i): Parent(state, step, why) for i, state, step, why in rows}

    def prune_workflows(self, conn: sqlite3.Connection, age: float) -> int:
        """Delete the workflows older than ``age`` seconds whose steps were all pruned."""
        with errors("prune"):
            params = {"before": self.clock.now() - age}
            return conn.execute(QUERIES["prune_workflows"], params).rowcount

    def _rewait(
        self, conn: sqlite3.Connection, edges: Sequence[tuple[uuid.UUID, uuid.UUID, str]]
    ) -> None:
        conn.executemany(QUERIES["rewait"], rewait_rows(edges))

    def _free_waits(
        self, conn: sqlite3.Connection, parents: Sequence[uuid.UUID]
    ) -> list[tuple[uuid.UUID, uuid.UUID, str]]:
        # The write lock, held since BEGIN IMMEDIATE, serializes what free_waits locks on
        # PostgreSQL.
        rows = conn.execute(QUERIES["free_waits"], (_ids(parents),)).fetchall()
        return [(uuid.UUID(c), uuid.UUID(p), policy) for c, p, policy in rows]

    def _children(
        self, conn: sqlite3.Connection, ids: Sequence[uuid.UUID]
    ) -> tuple[list[Child], Values]:
        children, refs = children_of(conn.execute(QUERIES["children"], (_ids(ids),)).fetchall())
        found = conn.execute(QUERIES["step_results"], (refs,)).fetchall() if refs else []
        return children, {i: (state, result, why) for i, state, result, why in found}
