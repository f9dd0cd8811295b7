"""The row each insert writes, for tasks with every field set: one task, one with a unique
key, a batch (COPY and INSERT on PostgreSQL), a batch in the caller's pipeline, a
workflow's steps (COPY and INSERT), and the asyncio stores' inserts. The values are
written out here, not read off the declaration (``txqueue.store.columns``), so a change to
it that changed a stored row fails here."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from txqueue import Task
from txqueue.core.ids import uuid7
from txqueue.core.task import SUCCEEDED
from txqueue.store.connections import bind_async
from txqueue.store.records import Planned, WorkflowPlan
from txqueue.testing.conformance import StoreCase, finish

AT = datetime(2031, 5, 6, 7, 8, 9, 250000, tzinfo=UTC)
DEADLINE = datetime(2031, 5, 6, 8, 8, 9, 500000, tzinfo=UTC)
TRACE = '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
PAYLOAD = {"n": 1, "s": "é", "l": [1, 2.5, None]}


def full(variant: str, key: str | None = None) -> Task:
    """A task with every field set: ``at`` runs at an instant and must start by one,
    ``delay`` runs a minute on and must start within 90 s of it, ``plain`` has neither a
    time nor a key (COPY takes it)."""
    when: dict[str, Any] = {"at": {"run_at": AT}, "delay": {"delay": 60}, "plain": {}}[variant]
    return Task(
        "t",
        PAYLOAD,
        queue="q",
        priority=-3,
        unique_key=key,
        max_attempts=4,
        timeout=12.5,
        concurrency_key="ck",
        expires=DEADLINE if variant == "at" else 90.0,
        time_limit=3.5,
        **when,
    )


def expected(variant: str, key: str | None = None) -> dict[str, Any]:
    """What the row of ``full(variant, key)`` holds, enqueued in the trace TRACE."""
    return {
        "queue": "q",
        "name": "t",
        "payload": PAYLOAD,
        "priority": -3,
        "run_at": {"at": AT, "delay": 60.0, "plain": 0.0}[variant],
        "max_attempts": 4,
        "timeout": 12.5,
        "unique_key": key,
        "trace_context": json.loads(TRACE),
        "concurrency_key": "ck",
        "start_by": DEADLINE if variant == "at" else None,
        "expires_in": None if variant == "at" else 90.0,
        "time_limit": 3.5,
        "state": "pending",
        "workflow_id": None,
        "step": None,
        "parents": None,
        "inputs": None,
    }


def view(row: dict[str, Any]) -> dict[str, Any]:
    """The columns an enqueue sets; run_at, when it is not an instant given, as seconds
    after the enqueue."""
    out = {k: row[k] for k in expected("at")}
    if isinstance(out["trace_context"], str):
        out["trace_context"] = json.loads(out["trace_context"])
    if row["run_at"] != AT:
        out["run_at"] = round((row["run_at"] - row["created_at"]).total_seconds(), 3)
    return out


def rest(row: dict[str, Any]) -> dict[str, Any]:
    """The columns an enqueue leaves to their defaults."""
    own = {*expected("at"), "id", "created_at", "updated_at"}
    return {k: v for k, v in row.items() if k not in own}


Written = list[tuple[uuid.UUID, dict[str, Any]]]


def _one(s: StoreCase, app: Any) -> Written:
    tasks = [(full("at"), expected("at")), (full("delay", "k1"), expected("delay", "k1"))]
    return [(s.store.insert_task(app, t, trace=TRACE).id, e) for t, e in tasks]


def _many(s: StoreCase, app: Any) -> Written:
    pairs = [
        (full("plain"), expected("plain")),
        (full("at", "k2"), expected("at", "k2")),
        (full("delay"), expected("delay")),
        (full("plain"), expected("plain")),
    ]
    out = s.store.insert_tasks(app, [t for t, _ in pairs], trace=TRACE)
    return [(i.id, e) for i, (_, e) in zip(out, pairs, strict=True)]


def _plan(variant: str) -> tuple[WorkflowPlan, list[dict[str, Any]]]:
    """A workflow of two steps, the second waiting on the first and taking its result."""
    a, b = uuid7(), uuid7()
    takes = {"x": {"as": "result", "from": str(a)}}
    plan = WorkflowPlan(
        uuid7(),
        "w",
        [
            Planned(a, full(variant), "a", {}, {}),
            Planned(b, full("plain"), "b", {str(a): "cancel"}, takes),
        ],
    )
    first = expected(variant) | {"workflow_id": plan.id, "step": "a"}
    second = expected("plain") | {
        "state": "waiting",
        "workflow_id": plan.id,
        "step": "b",
        "parents": {str(a): "cancel"},
        "inputs": takes,
    }
    return plan, [first, second]


def _workflow(variant: str) -> Callable[[StoreCase, Any], Written]:
    def write(s: StoreCase, app: Any) -> Written:
        plan, rows = _plan(variant)
        out = s.store.insert_workflow(app, plan, trace=TRACE)
        return [(i.id, e) for i, e in zip(out, rows, strict=True)]

    return write


def _in_asyncio(s: StoreCase) -> Written:
    async def main() -> Written:
        raw = await s.kind.open_async(s.url, False)
        try:
            adapted = await bind_async(raw)
            store, conn = adapted.store, adapted.conn
            written: Written = []
            for task, row in [(full("at"), expected("at")), (full("delay", "k3"), None)]:
                one = await store.insert_task(conn, task, trace=TRACE)
                written.append((one.id, row or expected("delay", "k3")))
            pairs = [(full("plain"), expected("plain")), (full("at", "k4"), expected("at", "k4"))]
            many = await store.insert_tasks(conn, [t for t, _ in pairs], trace=TRACE)
            written += [(i.id, e) for i, (_, e) in zip(many, pairs, strict=True)]
            for variant in ("plain", "delay"):
                plan, rows = _plan(variant)
                steps = await store.insert_workflow(conn, plan, trace=TRACE)
                written += [(i.id, e) for i, e in zip(steps, rows, strict=True)]
            await raw.commit()
            return written
        finally:
            await raw.close()

    return asyncio.run(main())


PATHS: dict[str, Callable[[StoreCase, Any], Written]] = {
    "one": _one,
    "many": _many,
    "workflow-copy": _workflow("plain"),
    "workflow-insert": _workflow("delay"),
}


def check(s: StoreCase, written: Written) -> None:
    """The rows ``written`` hold what was expected, and the rest as a plain task's."""
    by_id = {r["id"]: r for r in s.rows()}
    assert [(i, view(by_id[i])) for i, _ in written] == written
    plain = rest(s.row(s.enqueue()))
    assert [rest(by_id[i]) for i, _ in written] == [plain] * len(written)


@pytest.mark.parametrize("path", PATHS)
def test_each_insert_stores_every_field_as_given(s: StoreCase, path: str) -> None:
    app = s.app()
    written = PATHS[path](s, app)
    app.commit()
    check(s, written)


@pytest.mark.unsupported(sqlite="sqlite3 has no pipeline mode")
def test_a_batch_in_the_callers_pipeline_stores_every_field_as_given(s: StoreCase) -> None:
    app = s.app()
    with app.pipeline():
        written = _many(s, app)
    app.commit()
    check(s, written)


def test_the_asyncio_inserts_store_every_field_as_given(s: StoreCase) -> None:
    check(s, _in_asyncio(s))


def test_a_success_by_its_worker_keeps_a_short_history_entry(s: StoreCase) -> None:
    # The history is the largest part of a finished row: its move (the state it went to),
    # where it came from (running) and who made it (the attempt's worker) are left out.
    task_id = s.enqueue()
    [claimed] = s.claim(task_id)
    finish(s, claimed, SUCCEEDED)
    [stored] = s.row(task_id)["events"]
    assert set(stored) == {"at", "attempt", "to", "started", "worker"}
    assert isinstance(stored["at"], float) and isinstance(stored["started"], float)
