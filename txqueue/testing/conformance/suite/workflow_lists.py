"""Workflows listed: a page newest first below a workflow's id, each with its state read
from its steps (as ``get_workflow`` reads it), how many steps are in each state and when
the last one ended; narrowed by state, name and creation time."""

from __future__ import annotations

import contextlib
import itertools
import uuid
from typing import Any

from ....core.ids import uuid7
from ....core.task import CANCELLED, FAILED, STATES, SUCCEEDED
from ....store.records import Planned, WorkflowPlan
from ....workflows.graph import WorkflowSearch, WorkflowSummary
from ....workflows.readiness import OnFailure
from ..case import StoreCase
from .workflows import run, step


def write(s: StoreCase, name: str, *steps: Planned) -> WorkflowPlan:
    plan = WorkflowPlan(uuid7(), name, list(steps))
    with contextlib.closing(s.connect()) as c:
        s.store.insert_workflow(c, plan)
        c.commit()
    return plan


def listed(
    s: StoreCase, before: uuid.UUID | None = None, limit: int = 100, **search: Any
) -> list[WorkflowSummary]:
    return s.store.list_workflows(s.conn, WorkflowSearch(**search), before, limit)


def counts(**given: int) -> dict[str, int]:
    return {str(state): given.get(state, 0) for state in STATES}


def test_list_workflows_pages_newest_first_with_each_ones_steps_by_state(s: StoreCase) -> None:
    plans = []
    for n in range(5):
        a = step("a")
        plans.append(write(s, f"w{n}", a, step("b", {a.id: OnFailure.CANCEL})))
    newest = [p.id for p in reversed(plans)]

    first = listed(s, limit=2)
    assert [w.id for w in first] == newest[:2]
    assert [w.id for w in listed(s, first[-1].id, 2)] == newest[2:4]
    assert [w.id for w in listed(s, newest[3], 2)] == newest[4:]
    assert listed(s, newest[4]) == []
    summary = first[0]
    assert (summary.name, summary.state, summary.finished_at) == ("w4", "running", None)
    assert summary.steps == counts(pending=1, waiting=1)
    info = s.store.get_workflow(s.conn, summary.id)
    assert info is not None and summary.created_at == info.created_at


def test_list_workflows_reads_each_ones_state_from_its_steps_as_get_workflow_does(
    s: StoreCase,
) -> None:
    a = step("a")
    failed = write(s, "failed", a, step("b", {a.id: OnFailure.SKIP}))
    run(s, a, FAILED)
    a = step("a")
    b = step("b", {a.id: OnFailure.CANCEL})
    succeeded = write(s, "succeeded", a, b)
    run(s, a)
    run(s, b)
    cancelled = write(s, "cancelled", step("a"))
    with contextlib.closing(s.app()) as app:
        s.store.cancel_workflow(app, cancelled.id)
        app.commit()
    a = step("a")
    halfway = write(s, "halfway", a, step("b", {a.id: OnFailure.CANCEL}))
    run(s, a)
    fresh = write(s, "fresh", step("a"))

    by_id = {w.id: w for w in listed(s)}
    assert [w.name for w in by_id.values()] == [
        "fresh",
        "halfway",
        "cancelled",
        "succeeded",
        "failed",
    ]
    for w in by_id.values():
        info = s.store.get_workflow(s.conn, w.id)
        assert info is not None and w.state == info.state, w.name
        ends = [x.finished_at for x in info.steps if x.finished_at is not None]
        assert w.finished_at == (None if w.state == "running" else max(ends)), w.name
    assert by_id[failed.id].steps == counts(failed=1, cancelled=1)
    assert by_id[succeeded.id].steps == counts(succeeded=2)
    assert by_id[cancelled.id].steps == counts(cancelled=1)
    assert by_id[halfway.id].steps == counts(succeeded=1, pending=1)

    def names(*states: str) -> list[str]:
        return [w.name for w in listed(s, states=states)]

    assert names("running") == ["fresh", "halfway"]
    assert names(SUCCEEDED) == ["succeeded"]
    assert names(FAILED, CANCELLED) == ["cancelled", "failed"]
    assert len(names("running", SUCCEEDED, FAILED, CANCELLED)) == 5
    # A page by state starts below the workflow given, whatever that one's state.
    assert [w.id for w in listed(s, fresh.id, 1, states=(SUCCEEDED,))] == [succeeded.id]


def test_list_workflows_narrows_by_name_and_creation_time(s: StoreCase) -> None:
    plans = [write(s, name, step("a")) for name in ("nightly", "hourly", "nightly")]
    made = {w.id: w.created_at for w in listed(s)}
    times = [made[p.id] for p in plans]
    assert times == sorted(times)
    # Between two workflows' times: a store may keep a time finer than a datetime holds.
    first, second = (t + (u - t) / 2 for t, u in itertools.pairwise(times))

    def ids(**search: Any) -> list[uuid.UUID]:
        return [w.id for w in listed(s, **search)]

    assert ids(name="nightly") == [plans[2].id, plans[0].id]
    assert ids(name="weekly") == []
    assert ids(created_after=first) == [plans[2].id, plans[1].id]
    assert ids(created_before=first) == [plans[0].id]
    assert ids(created_after=first, created_before=second) == [plans[1].id]
    assert ids(name="nightly", created_after=first) == [plans[2].id]
