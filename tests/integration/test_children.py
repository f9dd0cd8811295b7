"""Children on each store (``ctx.start_child``, ``ctx.wait_child``, ``ctx.run_child``): a
handler enqueues a task exactly once and waits for its end parked, holding no worker; the
child's end, in the transaction that writes it, wakes the wait with its result, or with
why it failed or was cancelled."""

from __future__ import annotations

import asyncio
import time
import uuid
from contextlib import closing
from typing import Any

import pytest

import txqueue
from txqueue.testing import Clock, run_tasks

from .helpers import connect, enqueue_named, running, task_info


def test_a_child_runs_once_and_its_result_resumes_the_parent(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    tries: list[int] = []

    @registry.task("square", queue=queue)
    def square(n: int) -> int:
        return n * n

    @registry.task("report", queue=queue, context=True, max_attempts=3, backoff=0)
    def report(ctx: txqueue.TaskContext, n: int) -> str:
        value = ctx.run_child(square.task(n), name="square it")
        tries.append(value)
        if len(tries) == 1:
            raise RuntimeError("once more")  # the retry replays the child: no second one
        return f"{n}^2 = {value}"

    parent = enqueue_named(db_url, "report", queue, n=7)
    ran = run_tasks(registry, db_url)
    assert [(r.name, r.state) for r in ran][-1] == ("report", "succeeded")
    assert [r.state for r in ran if r.name == "report"] == ["parked", "pending", "succeeded"]
    assert [r.name for r in ran].count("square") == 1
    info = task_info(db_url, parent)
    assert info.result == "7^2 = 49"
    assert tries == [49, 49]
    names = [s.name for s in info.steps]
    assert names == ["square it", "square it ended until", "square it ended"]
    child = uuid.UUID(info.steps[0].result)
    assert task_info(db_url, child).result == 49
    woken = [e.reason for e in info.events if e.move == "woken"]
    assert woken == [f"signal task:{child}"]
    assert _kept_signals(db_url) == 0  # the child's taken; a task with no parent sends none


def _kept_signals(db_url: str) -> int:
    with closing(connect(db_url)) as c:
        return int(c.execute("SELECT count(*) FROM txqueue_signals").fetchone()[0])


def test_children_fan_out_and_each_result_comes_back_in_order(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()

    @registry.task("length", queue=queue)
    def length(word: str) -> int:
        return len(word)

    @registry.task("total", queue=queue, context=True)
    def total(ctx: txqueue.TaskContext, words: list[str]) -> list[int]:
        ids = [ctx.start_child(length.task(w)) for w in words]
        return [ctx.wait_child(i) for i in ids]

    parent = enqueue_named(db_url, "total", queue, words=["a", "bb", "ccc"])
    run_tasks(registry, db_url)
    info = task_info(db_url, parent)
    assert (info.state, info.result) == ("succeeded", [1, 2, 3])
    assert [s.name for s in info.steps][:3] == ["child 1", "child 2", "child 3"]


def test_a_child_that_ended_before_the_wait_is_kept_for_it(
    db_url: str, queue: str, clock: Clock
) -> None:
    registry = txqueue.Registry()

    @registry.task("echo", queue=queue)
    def echo(text: str) -> str:
        return text

    @registry.task("later", queue=queue, context=True)
    def later(ctx: txqueue.TaskContext) -> str:
        child = ctx.start_child(echo.task("hello"))
        ctx.sleep(600)  # the child ends meanwhile: its signal is kept for the wait
        return str(ctx.wait_child(child))

    parent = enqueue_named(db_url, "later", queue)
    assert [r.state for r in run_tasks(registry, db_url)] == ["parked", "succeeded"]
    assert task_info(db_url, parent).state == "parked"  # asleep: the child's end woke no one
    ran = run_tasks(registry, db_url, clock=clock)
    assert [(r.state, r.result) for r in ran] == [("succeeded", "hello")]
    moves = [e.move for e in task_info(db_url, parent).events if e.move != "step"]
    assert moves == ["claimed", "parked", "woken", "claimed", "succeeded"]  # no second park


def test_a_failed_or_cancelled_child_is_a_catchable_error_in_the_parent(
    db_url: str, queue: str
) -> None:
    registry = txqueue.Registry()

    @registry.task("fragile", queue=queue, max_attempts=1)
    def fragile() -> None:
        raise ValueError("no such page")

    @registry.task("idle", queue=queue, context=True)
    def idle(ctx: txqueue.TaskContext) -> None:
        ctx.sleep(86400)

    @registry.task("watch", queue=queue, context=True)
    def watch(ctx: txqueue.TaskContext, which: str) -> list[Any]:
        child = fragile.task() if which == "fragile" else idle.task()
        try:
            return ["ok", ctx.run_child(child)]
        except txqueue.ChildFailedError as exc:
            return [exc.state, exc.reason, str(exc.task_id)]

    failing = enqueue_named(db_url, "watch", queue, which="fragile")
    run_tasks(registry, db_url)
    info = task_info(db_url, failing)
    child = info.steps[0].result
    assert info.result == ["failed", "builtins.ValueError: no such page", child]

    cancelled = enqueue_named(db_url, "watch", queue, which="idle")
    run_tasks(registry, db_url)
    sleeper = uuid.UUID(task_info(db_url, cancelled).steps[0].result)
    assert task_info(db_url, sleeper).state == "parked"
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        assert txqueue.cancel(c, sleeper, by="ops") == "cancelled"
    assert task_info(db_url, cancelled).state == "pending"  # woken by the cancel's commit
    run_tasks(registry, db_url)
    assert task_info(db_url, cancelled).result[0] == "cancelled"


def test_a_child_retried_by_hand_before_its_parent_waits_gives_its_last_end(
    db_url: str, queue: str, clock: Clock
) -> None:
    registry = txqueue.Registry()
    runs: list[str] = []

    @registry.task("flaky", queue=queue, max_attempts=1)
    def flaky() -> str:
        runs.append("run")
        if len(runs) == 1:
            raise RuntimeError("down")
        return "up"

    @registry.task("patient", queue=queue, context=True)
    def patient(ctx: txqueue.TaskContext) -> Any:
        child = ctx.start_child(flaky.task())
        ctx.sleep(600)
        return ctx.wait_child(child)

    parent = enqueue_named(db_url, "patient", queue)
    assert [r.state for r in run_tasks(registry, db_url)] == ["parked", "failed"]
    child = uuid.UUID(task_info(db_url, parent).steps[0].result)
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        txqueue.retry(c, child, by="ops")
    assert [r.state for r in run_tasks(registry, db_url)] == ["succeeded"]
    ran = run_tasks(registry, db_url, clock=clock)
    assert [(r.state, r.result) for r in ran] == [("succeeded", "up")]  # not the failure
    assert _kept_signals(db_url) == 0


def test_a_child_cancelled_in_bulk_wakes_its_parent(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()

    @registry.task("slow", queue=queue, context=True)
    def slow(ctx: txqueue.TaskContext) -> None:
        ctx.sleep(86400)

    @registry.task("overseer", queue=queue, context=True)
    def overseer(ctx: txqueue.TaskContext) -> str:
        try:
            ctx.run_child(slow.task())
        except txqueue.ChildFailedError as exc:
            return exc.state
        return "done"

    parent = enqueue_named(db_url, "overseer", queue)
    run_tasks(registry, db_url)
    where = txqueue.TaskFilter(queue=queue, name="slow")
    assert txqueue.cancel_tasks(where, by="ops", database_url=db_url) == 1
    assert task_info(db_url, parent).state == "pending"
    run_tasks(registry, db_url)
    assert task_info(db_url, parent).result == "cancelled"


def test_a_child_whose_unique_key_is_held_is_refused_and_bad_children_fail_clearly(
    db_url: str, queue: str
) -> None:
    registry = txqueue.Registry()  # without "once": its holder stays pending

    @registry.task("spawn", queue=queue, context=True)
    def spawn(ctx: txqueue.TaskContext, what: str) -> None:
        if what == "keyed":
            ctx.start_child(txqueue.Task("once", queue=queue, unique_key="only"))
        elif what == "not a task":
            ctx.start_child("once")  # type: ignore[arg-type]
        elif what == "id":
            ctx.wait_child("not an id")  # type: ignore[arg-type]
        elif what == "stranger":
            ctx.wait_child(uuid.uuid4())  # no child of this task's
        else:
            ctx.wait_for(f"task:{uuid.uuid4()}")  # a child's end: not for wait_for

    with closing(connect(db_url)) as c, txqueue.transaction(c):
        holder = txqueue.enqueue(c, txqueue.Task("once", queue=queue, unique_key="only"))
    whats = ("keyed", "not a task", "id", "stranger", "key")
    ids = [enqueue_named(db_url, "spawn", queue, what=w) for w in whats]
    run_tasks(registry, db_url)
    errors = [task_info(db_url, i).errors[-1] for i in ids]
    assert [(e["type"], task_info(db_url, i).state) for e, i in zip(errors, ids, strict=True)] == [
        ("txqueue.errors.StepError", "failed")
    ] * len(whats)
    assert str(holder) in errors[0]["message"] and "unique_key" in errors[0]["message"]
    assert "txqueue.Task" in errors[1]["message"]
    assert "UUID" in errors[2]["message"]
    assert "no child this task started" in errors[3]["message"]
    assert "children's ends" in errors[4]["message"]
    with closing(connect(db_url)) as c, pytest.raises(txqueue.InvalidValueError, match="key"):
        txqueue.signal(c, f"task:{holder}", {"state": "succeeded"})
    with closing(connect(db_url)) as c:
        assert txqueue.count_tasks(c, txqueue.TaskFilter(queue=queue, name="once")) == 1


def test_an_async_handler_runs_a_child(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()

    @registry.task("double", queue=queue)
    async def double(n: int) -> int:
        await asyncio.sleep(0)
        return 2 * n

    @registry.task("chain", queue=queue, context=True)
    async def chain(ctx: txqueue.TaskContext, n: int) -> int:
        first = await ctx.run_child_async(double.task(n))
        child = await ctx.start_child_async(double.task(first))
        return int(await ctx.wait_child_async(child))

    parent = enqueue_named(db_url, "chain", queue, n=5)
    run_tasks(registry, db_url)
    assert task_info(db_url, parent).result == 20


def test_a_worker_runs_the_child_at_once_and_its_end_wakes_the_parent(
    db_url: str, queue: str
) -> None:
    registry = txqueue.Registry()
    times: dict[str, float] = {}

    @registry.task("leaf", queue=queue)
    def leaf() -> str:
        times["leaf"] = time.monotonic()
        return "done"

    @registry.task("root", queue=queue, context=True)
    def root(ctx: txqueue.TaskContext) -> str:
        got = str(ctx.run_child(leaf.task()))
        times["root"] = time.monotonic()
        return got

    # One handler thread: the parent, parked, must not hold it from its child.
    worker = txqueue.Worker(
        registry, database_url=db_url, amqp_url=None, queues=[queue], concurrency=1
    )
    with running(worker):
        started = time.monotonic()
        parent = enqueue_named(db_url, "root", queue)
        while task_info(db_url, parent).state != "succeeded":
            assert time.monotonic() - started < 15, f"not done: {times}"
            time.sleep(0.05)
    assert times["root"] - times["leaf"] < 1.0  # woken by the end, not by a look
    assert task_info(db_url, parent).result == "done"


def test_a_child_is_only_started_from_a_worker() -> None:
    ctx = txqueue.TaskContext(uuid.uuid4(), "t", "q", 1, 1, "w", lambda: True)
    with pytest.raises(txqueue.TaskError, match="worker"):
        ctx.start_child(txqueue.Task("t"))


def test_a_child_workflow_comes_back_as_the_results_of_its_last_steps(
    db_url: str, queue: str
) -> None:
    registry = txqueue.Registry()

    @registry.task("fetch", queue=queue, max_attempts=1)
    def fetch(url: str) -> int:
        if url == "bad":
            raise ValueError("unreachable")
        return len(url)

    @registry.task("add", queue=queue)
    def add(sizes: list[int]) -> int:
        return sum(sizes)

    @registry.task("crawl", queue=queue, context=True, max_attempts=1)
    def crawl(ctx: txqueue.TaskContext, urls: list[str]) -> Any:
        flow = txqueue.Workflow("crawl")
        pages = [flow.step(fetch, u) for u in urls]
        flow.step(add, flow.results(pages))
        flow.step(fetch, "side")  # a second end, "fetch#3": no step comes after it
        try:
            return ctx.run_child(flow, name="crawl")
        except txqueue.ChildFailedError as exc:
            return [exc.state, exc.reason]

    good = enqueue_named(db_url, "crawl", queue, urls=["a", "bb"])
    run_tasks(registry, db_url)
    info = task_info(db_url, good)
    assert info.result == {"add": 3, "fetch#3": 4}
    flow_id = uuid.UUID(info.steps[0].result["workflow"])
    assert [step for step, _ in info.steps[0].result["ends"]] == ["add", "fetch#3"]
    with closing(connect(db_url)) as c:
        assert txqueue.get_workflow(c, flow_id).state == "succeeded"
    assert [s.name for s in info.steps][1:] == [
        "crawl ended add until",
        "crawl ended add",
        "crawl ended fetch#3 until",
        "crawl ended fetch#3",
    ]

    bad = enqueue_named(db_url, "crawl", queue, urls=["a", "bad"])
    run_tasks(registry, db_url)
    state, reason = task_info(db_url, bad).result
    assert state == "cancelled" and "unreachable" in reason  # add blocked by its parent
