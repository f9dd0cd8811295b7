"""Workflows run by a worker and by ``run_tasks``, on each store: typed results through
the database, joins, failure policies, and steps woken by their parents' ends."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime

import pytest

import txqueue
from txqueue import OnFailure, Outcome, Registry, Task, Workflow, WorkflowError
from txqueue.testing import Clock, run_tasks

from .conftest import Run
from .helpers import connect, rows


@dataclass(frozen=True)
class Page:
    url: str
    words: int


class Site:
    """Tasks that fetch pages, count their words, and report; one that always fails."""

    def __init__(self, queue: str) -> None:
        self.registry = registry = Registry()
        self.order: list[str] = []  # steps in the order they started
        lock = threading.Lock()

        def started(name: str) -> None:
            with lock:
                self.order.append(name)

        @registry.task(queue=queue)
        def fetch(url: str) -> Page:
            started(f"fetch {url}")
            return Page(url, len(url))

        @registry.task(queue=queue, max_attempts=1)
        def broken(url: str) -> Page:
            started("broken")
            raise ValueError(f"no page at {url}")

        @registry.task(queue=queue)
        def total(pages: list[Page], extra: int = 0) -> int:
            started("total")
            return sum(p.words for p in pages) + extra

        @registry.task(queue=queue)
        def report(count: int, title: str) -> str:
            started("report")
            return f"{title}: {count}"

        @registry.task(queue=queue)
        def audit(seen: list[Outcome[Page]]) -> list[str]:
            started("audit")
            return [
                f"{o.result.url} ok" if o.result is not None else f"{o.state}: {o.reason}"
                for o in seen
            ]

        @registry.task(queue=queue)
        def bump(n: int) -> int:
            return n + 1

        self.fetch, self.broken, self.total, self.bump = fetch, broken, total, bump
        self.report, self.audit = report, audit


def _enqueue(db_url: str, flow: Workflow) -> uuid.UUID:
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        return txqueue.enqueue_workflow(c, flow)


def _states(db_url: str) -> dict[str, str]:
    return {r["step"]: r["state"] for r in rows(db_url)}


def _result(db_url: str, step: txqueue.Step[object]) -> object:
    with closing(connect(db_url)) as c:
        return txqueue.get_task(c, step.id).result


def test_a_fan_out_joined_then_chained_runs_each_step_after_its_parents_with_their_results(
    run: Run, db_url: str, queue: str
) -> None:
    site = Site(queue)
    flow = Workflow("count words")
    pages = [flow.step(site.fetch, url) for url in ("a", "bb", "ccc")]
    counted = flow.step(site.total, flow.results(pages), extra=10)
    reported = flow.step(site.report, counted.result, title="words")

    workflow_id = _enqueue(db_url, flow)
    run(site.registry, db_url)

    assert workflow_id == flow.id
    assert _states(db_url) == dict.fromkeys(
        ["fetch", "fetch#2", "fetch#3", "total", "report"], "succeeded"
    )
    assert _result(db_url, counted) == 16
    assert _result(db_url, reported) == "words: 16"
    assert sorted(site.order[:3]) == ["fetch a", "fetch bb", "fetch ccc"]
    assert site.order[3:] == ["total", "report"]
    with closing(connect(db_url)) as c:
        info = txqueue.get_workflow(c, workflow_id)
    assert (info.id, info.name, info.state) == (flow.id, "count words", "succeeded")
    assert [s.step for s in info.steps] == ["fetch", "fetch#2", "fetch#3", "total", "report"]
    assert info.step("total").parents == tuple(p.id for p in pages)
    assert info.results == {"report": "words: 16"}


def test_a_failed_step_blocks_what_needs_its_result_and_runs_what_takes_its_outcome(
    run: Run, db_url: str, queue: str
) -> None:
    site = Site(queue)
    flow = Workflow("audit")
    good = flow.step(site.fetch, "a")
    bad = flow.step(site.broken, "nowhere")
    counted = flow.step(site.total, flow.results([good, bad]))
    reported = flow.step(site.report, counted.result, title="never")
    audited = flow.step(site.audit, flow.outcomes([good, bad]))

    _enqueue(db_url, flow)
    run(site.registry, db_url)

    assert _states(db_url) == {
        "fetch": "succeeded",
        "broken": "failed",
        "total": "cancelled",
        "report": "cancelled",
        "audit": "succeeded",
    }
    assert "total" not in site.order and "report" not in site.order
    audited_result = ["a ok", "failed: builtins.ValueError: no page at nowhere"]
    assert _result(db_url, audited) == audited_result
    with closing(connect(db_url)) as c:
        blocked = txqueue.get_task(c, counted.id).events[-1]
        cascaded = txqueue.get_task(c, reported.id).events[-1]
    assert (blocked.move, blocked.by) == ("blocked", "workflow")
    assert (
        blocked.reason
        == f"parent broken ({bad.id}) failed: builtins.ValueError: no page at nowhere"
    )
    assert cascaded.reason is not None and cascaded.reason.startswith(
        f"parent total ({counted.id})"
    )
    info = asyncio.run(txqueue.wait_workflow_async(db_url, flow.id, timeout=10))
    assert info.state == "failed"
    assert (info.step("total").move, info.step("total").reason) == ("blocked", blocked.reason)
    assert info.step("broken").reason == "builtins.ValueError: no page at nowhere"
    assert info.results == {"report": None, "audit": audited_result}


def test_workflows_are_listed_in_the_state_their_steps_give_and_bad_arguments_named(
    db_url: str, queue: str
) -> None:
    site = Site(queue)
    good, bad, later = Workflow("nightly"), Workflow("nightly"), Workflow("hourly")
    good.step(site.total, good.results([good.step(site.fetch, "a")]))
    bad.step(site.total, bad.results([bad.step(site.broken, "b")]))
    _enqueue(db_url, good)
    _enqueue(db_url, bad)
    run_tasks(site.registry, db_url)
    later.step(site.fetch, "c")
    _enqueue(db_url, later)
    ended = ["succeeded", "failed"]

    with closing(connect(db_url)) as c:
        listed = txqueue.list_workflows(c)
        failed = txqueue.list_workflows(c, state="failed")
        first = txqueue.list_workflows(c, state=ended, name="nightly", limit=1)
        rest = txqueue.list_workflows(c, state=ended, name="nightly", before=str(first[0].id))
        for wrong, field in [
            ({"state": "waiting"}, "state"),  # a step's state, not a workflow's
            ({"state": []}, "state"),
            ({"limit": 0}, "limit"),
            ({"limit": 1001}, "limit"),
            ({"before": "nope"}, "before"),
            ({"name": ""}, "name"),
            ({"created_after": datetime.now()}, "created_after"),  # naive
        ]:
            with pytest.raises(txqueue.InvalidValueError) as refused:
                txqueue.list_workflows(c, **wrong)  # type: ignore[arg-type]
            assert refused.value.field == field, wrong
    assert [(w.id, w.name, w.state) for w in listed] == [
        (later.id, "hourly", "running"),
        (bad.id, "nightly", "failed"),
        (good.id, "nightly", "succeeded"),
    ]
    zero = {str(state): 0 for state in txqueue.TaskState}
    assert [w.steps for w in listed] == [
        {**zero, "pending": 1},
        {**zero, "failed": 1, "cancelled": 1},
        {**zero, "succeeded": 2},
    ]
    assert listed[0].finished_at is None and listed[2].finished_at is not None
    assert [w.id for w in failed] == [bad.id]
    assert [w.id for w in first + rest] == [bad.id, good.id]
    with pytest.raises(txqueue.InvalidValueError, match="must be one of running, succeeded"):
        asyncio.run(txqueue.list_workflows_async(object(), state="waiting"))


def test_plain_tasks_chain_with_after_and_a_skip(run: Run, db_url: str, queue: str) -> None:
    site = Site(queue)
    flow = Workflow()
    first = flow.add(Task("broken", {"url": "x"}, queue=queue))
    skipped = flow.add(Task("fetch", {"url": "y"}, queue=queue), after=[first], on_failure="skip")
    last = flow.add(
        Task("fetch", {"url": "z"}, queue=queue), after=[first], on_failure=OnFailure.RUN
    )

    _enqueue(db_url, flow)
    run(site.registry, db_url)

    with closing(connect(db_url)) as c:
        assert txqueue.get_task(c, skipped.id).events[-1].move == "skipped"
        assert txqueue.get_task(c, last.id).state == "succeeded"


def test_a_chains_steps_are_claimed_by_their_parents_outcome_writes_not_by_the_poll(
    db_url: str, amqp_url: str, queue: str
) -> None:
    site = Site(queue)
    flow = Workflow("chain")
    step = flow.step(site.bump, 0)
    for _ in range(10):
        step = flow.step(site.bump, step.result)
    worker = txqueue.Worker(site.registry, database_url=db_url, amqp_url=amqp_url, poll_interval=60)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        began = time.monotonic()
        _enqueue(db_url, flow)
        info = txqueue.wait_workflow(db_url, flow.id, timeout=30)
        took = time.monotonic() - began
    finally:
        worker.stop()
        thread.join(30)
    assert info.state == "succeeded"
    assert info.results == {step.name: 11}
    # Ten hops, none waiting for the worker's next poll, a minute away: each step after the
    # first was claimed in the transaction that readied it; only the first came by a
    # wake-up (or by the worker's first poll).
    assert took < 30
    assert worker.stats["claimed"] == 11
    assert worker.stats["woken"] <= 1


def test_a_workflow_is_refused_before_anything_is_written(db_url: str, queue: str) -> None:
    site = Site(queue)
    flow, other = Workflow("one"), Workflow("two")
    a = flow.step(site.fetch, "a")
    b = flow.step(site.fetch, "b").after(a)
    with pytest.raises(WorkflowError, match=r"a cycle: fetch#2 -> fetch -> fetch#2"):
        a.after(b)
    with pytest.raises(WorkflowError, match="of another workflow"):
        other.step(site.total, flow.results([a]))
    assert len(other) == 0  # refused whole: no step half added
    with pytest.raises(WorkflowError, match="has no step"):
        _enqueue(db_url, Workflow("empty"))
    with pytest.raises(txqueue.InvalidValueError, match="on_failure"):
        b.after(a, on_failure="ignore")
    with pytest.raises(txqueue.InvalidValueError, match=r"pages: .*Workflow.results"):
        flow.step(site.total, [a.result])
    assert rows(db_url) == []


def test_the_cleaner_prunes_a_workflow_with_its_steps(
    db_url: str, queue: str, clock: Clock
) -> None:
    site = Site(queue)
    flow = Workflow("short-lived")
    flow.step(site.bump, flow.step(site.bump, 1).result)
    _enqueue(db_url, flow)
    run_tasks(site.registry, db_url)
    cleaner = txqueue.Cleaner(database_url=db_url, amqp_url=None, retain=3600)

    assert cleaner.run_once().pruned == 0
    clock.advance(3601)
    assert cleaner.run_once().pruned == 2
    with closing(connect(db_url)) as c, pytest.raises(txqueue.TaskNotFoundError):
        txqueue.get_workflow(c, flow.id)


def test_the_steps_an_atomic_steps_success_readies_are_woken_at_its_commit(
    db_url: str, amqp_url: str, queue: str
) -> None:
    registry = Registry()

    @registry.task(queue=queue, atomic=True, context=True)
    def bump(ctx: txqueue.TaskContext, n: int) -> int:
        return n + 1

    flow = Workflow("atomic chain")
    step = flow.step(bump, 0)
    for _ in range(4):
        step = flow.step(bump, step.result)
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=amqp_url, poll_interval=60)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        _enqueue(db_url, flow)
        # Four hops, each written in its handler's transaction: none may wait for the poll.
        info = txqueue.wait_workflow(db_url, flow.id, timeout=20)
    finally:
        worker.stop()
        thread.join(30)
    assert info.results == {step.name: 5}
