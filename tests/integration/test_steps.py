"""Durable steps on each store, run by the worker's run path (``run_tasks``): a step runs
once and later attempts get its result back, typed; an atomic step's work and record
commit together; steps that do not fit those recorded fail the task for good."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from datetime import date
from typing import Any

import pytest

import txqueue
from txqueue.testing import Clock, run_tasks

from .helpers import connect, enqueue_named, task_info
from .test_cli import cli


@dataclass(frozen=True)
class Seat:
    row: int
    letter: str
    day: date


def test_a_step_runs_once_and_later_attempts_get_its_result_typed(
    db_url: str, queue: str, clock: Clock
) -> None:
    registry = txqueue.Registry()
    calls: list[str] = []
    seen: list[Any] = []

    def reserve(flight: str) -> Seat:
        calls.append("reserve")
        return Seat(12, "A", date(2026, 12, 24))

    def charge(amount: int) -> int:
        calls.append("charge")
        return amount * 100

    @registry.task("book", queue=queue, context=True, max_attempts=3)
    def book(ctx: txqueue.TaskContext, flight: str) -> int:
        seat = ctx.step("reserve", reserve, flight)
        seen.append(seat)
        if ctx.attempt == 1:
            raise RuntimeError("the card service is down")
        return ctx.step("charge", charge, amount=42)

    task_id = enqueue_named(db_url, "book", queue, flight="TX100")
    ran = run_tasks(registry, db_url, clock=clock)
    assert [(r.attempt, r.state) for r in ran] == [(1, "pending"), (2, "succeeded")]
    assert calls == ["reserve", "charge"]  # the second attempt did not reserve again
    # The recorded result comes back as the function's annotation says, as it first was.
    assert seen == [Seat(12, "A", date(2026, 12, 24))] * 2
    assert ran[-1].result == 4200

    info = task_info(db_url, task_id)
    assert [(s.name, s.result, s.attempt) for s in info.steps] == [
        ("reserve", {"row": 12, "letter": "A", "day": "2026-12-24"}, 1),
        ("charge", 4200, 2),
    ]
    assert all(s.took >= 0 for s in info.steps)
    moves = [(e.move, e.attempt, e.reason) for e in info.events if e.move == "step"]
    assert moves == [("step", 1, "reserve"), ("step", 2, "charge")]
    shown = info.as_dict()["steps"]
    assert [(s["name"], s["attempt"]) for s in shown] == [("reserve", 1), ("charge", 2)]


def test_steps_that_do_not_fit_those_recorded_fail_the_task_for_good(
    db_url: str, queue: str, clock: Clock
) -> None:
    registry = txqueue.Registry()
    failed: list[txqueue.FailedTask] = []
    registry.on_failed(failed.append)

    @registry.task("reordered", queue=queue, context=True, max_attempts=5)
    def reordered(ctx: txqueue.TaskContext) -> None:
        order = ["a", "b"] if ctx.attempt == 1 else ["b", "a"]  # a deploy swapped them
        for name in order:
            ctx.step(name, lambda: 1)
        raise RuntimeError("fails after its steps")

    @registry.task("twice", queue=queue, context=True, max_attempts=5)
    def twice(ctx: txqueue.TaskContext) -> None:
        ctx.step("send", lambda: 1)
        ctx.step("send", lambda: 2)

    reordered_id = enqueue_named(db_url, "reordered", queue)
    twice_id = enqueue_named(db_url, "twice", queue)
    run_tasks(registry, db_url, clock=clock)

    info = task_info(db_url, reordered_id)
    assert (info.state, info.attempts) == ("failed", 2)  # no retry after the StepError
    assert info.errors[-1]["type"] == "txqueue.errors.StepError"
    assert info.errors[-1]["message"] == (
        "step 'a': was recorded before step 'b', which this attempt replayed first: a "
        "handler's steps must come in the same order on every attempt"
    )
    info = task_info(db_url, twice_id)
    assert (info.state, info.attempts) == ("failed", 1)
    assert "two steps of one attempt have this name" in info.errors[-1]["message"]
    assert [s.name for s in info.steps] == ["send"]
    assert {(f.name, f.reason) for f in failed} == {
        ("reordered", "its steps do not fit those recorded"),
        ("twice", "its steps do not fit those recorded"),
    }


def test_a_result_that_is_not_json_a_bad_name_and_a_step_in_an_atomic_task_fail_for_good(
    db_url: str, queue: str
) -> None:
    registry = txqueue.Registry()

    @registry.task("opaque", queue=queue, context=True, max_attempts=1)
    def opaque(ctx: txqueue.TaskContext) -> None:
        ctx.step("open", lambda: object())

    @registry.task("whole", queue=queue, context=True, max_attempts=1, atomic=True)
    def whole(ctx: txqueue.TaskContext) -> None:
        ctx.step("part", lambda: 1)

    @registry.task("unnamed", queue=queue, context=True, max_attempts=1)
    def unnamed(ctx: txqueue.TaskContext) -> None:
        ctx.step("", lambda: 1)

    ids = [enqueue_named(db_url, name, queue) for name in ("opaque", "whole", "unnamed")]
    run_tasks(registry, db_url)
    errors = [task_info(db_url, i).errors[-1] for i in ids]
    assert [(e["type"], e["message"]) for e in errors] == [
        (
            "txqueue.errors.StepError",
            "step 'open': its result: is not JSON-serializable (Object of type object is not "
            "JSON serializable)",
        ),
        (
            "txqueue.errors.StepError",
            "step 'part': an atomic task commits as one: steps need a task that is not",
        ),
        ("txqueue.errors.StepError", "step '': a step's name must be 1 to 200 characters"),
    ]
    assert all(task_info(db_url, i).steps == [] for i in ids)


def test_a_step_whose_failure_was_caught_runs_again_and_steps_neither_nest_nor_overlap(
    db_url: str, queue: str, clock: Clock
) -> None:
    registry = txqueue.Registry()
    tries: list[int] = []

    def optional(attempt: int) -> int:
        tries.append(attempt)
        if attempt == 1:
            raise ConnectionError("the optional service is down")
        return attempt

    @registry.task("tolerant", queue=queue, context=True, max_attempts=2)
    def tolerant(ctx: txqueue.TaskContext) -> list[Any]:
        try:
            got = ctx.step("optional", optional, ctx.attempt)
        except ConnectionError:
            got = None
        after = ctx.step("after", lambda: "done")
        if ctx.attempt == 1:
            raise RuntimeError("fails after both")
        return [got, after]

    @registry.task("nested", queue=queue, context=True, max_attempts=3)
    def nested(ctx: txqueue.TaskContext) -> None:
        ctx.step("outer", lambda: ctx.step("inner", lambda: 1))

    @registry.task("overlapping", queue=queue, context=True, max_attempts=3)
    async def overlapping(ctx: txqueue.TaskContext) -> None:
        async def pause() -> None:
            await asyncio.sleep(0.01)

        await asyncio.gather(ctx.step_async("one", pause), ctx.step_async("two", pause))

    ids = [enqueue_named(db_url, name, queue) for name in ("tolerant", "nested", "overlapping")]
    ran = run_tasks(registry, db_url, clock=clock)
    assert [r.result for r in ran if r.id == ids[0]] == [None, [2, "done"]]
    assert tries == [1, 2]  # not recorded when it failed: run again, and "after" replayed
    infos = [task_info(db_url, i) for i in ids]
    assert [s.name for s in infos[0].steps] == ["after", "optional"]
    for info in infos[1:]:  # failed for good on their first attempt
        assert (info.state, info.attempts, info.steps) == ("failed", 1, [])
        assert info.errors[-1]["message"].endswith(
            "another step is running: steps neither nest nor overlap"
        )


def _ledger(db_url: str) -> list[tuple[str, int]]:
    with closing(connect(db_url)) as c:
        return sorted((str(r[0]), int(r[1])) for r in c.execute("SELECT task_id, n FROM ledger"))


def _insert(conn: Any, task_id: str, n: int) -> None:
    mark = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    conn.execute(f"INSERT INTO ledger (task_id, n) VALUES ({mark}, {mark})", (task_id, n))


@pytest.fixture
def ledger(db_url: str) -> None:
    with closing(connect(db_url)) as c:
        c.execute("CREATE TABLE ledger (task_id text NOT NULL, n integer NOT NULL)")
        c.commit()


@pytest.mark.usefixtures("ledger")
def test_an_atomic_steps_work_commits_with_its_record_and_rolls_back_without_it(
    db_url: str, queue: str, clock: Clock
) -> None:
    registry = txqueue.Registry()

    def debit(conn: Any, task_id: str, n: int, fail: bool) -> int:
        _insert(conn, task_id, n)
        if fail:
            raise RuntimeError("the step's function failed after its insert")
        return n

    @registry.task("pay", queue=queue, context=True, max_attempts=4)
    def pay(ctx: txqueue.TaskContext) -> int:
        ctx.atomic_step("debit 1", debit, str(ctx.id), 1, False)
        # The second step fails on the first attempt: its insert is rolled back with it.
        ctx.atomic_step("debit 2", debit, str(ctx.id), 2, ctx.attempt == 1)
        if ctx.attempt == 2:
            raise RuntimeError("fails after both steps")
        return ctx.attempt

    task_id = enqueue_named(db_url, "pay", queue)
    ran = run_tasks(registry, db_url, clock=clock)
    assert [(r.attempt, r.state) for r in ran] == [(1, "pending"), (2, "pending"), (3, "succeeded")]
    assert _ledger(db_url) == [(str(task_id), 1), (str(task_id), 2)]  # each once
    steps = task_info(db_url, task_id).steps
    assert [(s.name, s.attempt, s.result) for s in steps] == [("debit 1", 1, 1), ("debit 2", 2, 2)]


def test_an_async_handlers_steps_run_once(db_url: str, queue: str, clock: Clock) -> None:
    registry = txqueue.Registry()
    calls: list[str] = []

    async def fetch(url: str) -> dict[str, str]:
        calls.append(url)
        return {"body": f"<html>{url}</html>"}

    @registry.task("crawl", queue=queue, context=True, max_attempts=2)
    async def crawl(ctx: txqueue.TaskContext, url: str) -> str:
        page = await ctx.step_async("fetch", fetch, url)
        if ctx.attempt == 1:
            raise RuntimeError("the parser crashed")
        return page["body"]

    enqueue_named(db_url, "crawl", queue, url="https://example.invalid/")
    ran = run_tasks(registry, db_url, clock=clock)
    assert [(r.attempt, r.state, r.result) for r in ran][-1] == (
        2,
        "succeeded",
        "<html>https://example.invalid/</html>",
    )
    assert calls == ["https://example.invalid/"]


def test_a_workflows_step_resumes_at_its_own_steps(db_url: str, queue: str, clock: Clock) -> None:
    registry = txqueue.Registry()
    fetched: list[int] = []

    @registry.task("fetch", queue=queue, context=True, max_attempts=2)
    def fetch(ctx: txqueue.TaskContext, n: int) -> int:
        page = ctx.step("page", lambda: fetched.append(n) or n * 10)
        if ctx.attempt == 1:
            raise RuntimeError("the parser crashed")
        return page

    @registry.task("total", queue=queue)
    def total(pages: list[int]) -> int:
        return sum(pages)

    flow = txqueue.Workflow("crawl")
    flow.step(total, flow.results([flow.step(fetch, n) for n in (1, 2)]))
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        txqueue.enqueue_workflow(c, flow)
    ran = run_tasks(registry, db_url, clock=clock)
    assert sorted(fetched) == [1, 2]  # each part's step ran once, over its two attempts
    assert [(r.name, r.state, r.result) for r in ran][-1] == ("total", "succeeded", 30)


def test_a_workers_async_handler_resumes_at_its_steps(db_url: str, queue: str) -> None:
    # The worker's own event loop, its steps' records written off it on the handler
    # thread's connection.
    registry = txqueue.Registry()
    calls: list[int] = []

    async def fetch(n: int) -> int:
        calls.append(n)
        await asyncio.sleep(0)
        return n * 2

    @registry.task("crawl", queue=queue, context=True, max_attempts=2, backoff=0)
    async def crawl(ctx: txqueue.TaskContext, n: int) -> int:
        doubled = await ctx.step_async("fetch", fetch, n)
        if ctx.attempt == 1:
            raise RuntimeError("the parser crashed")
        return doubled

    ids = [enqueue_named(db_url, "crawl", queue, n=n) for n in range(4)]
    worker = txqueue.Worker(
        registry, database_url=db_url, amqp_url=None, queues=[queue], concurrency=2
    )
    worker.run(burst=True)
    assert sorted(calls) == [0, 1, 2, 3]  # once each, over two attempts
    assert [(task_info(db_url, i).state, task_info(db_url, i).result) for i in ids] == [
        ("succeeded", n * 2) for n in range(4)
    ]


def test_txqueue_show_prints_the_steps(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()

    @registry.task("stepped", queue=queue, context=True)
    def stepped(ctx: txqueue.TaskContext) -> None:
        ctx.step("reserve", lambda: {"seat": "12A"})
        ctx.step("long", lambda: "x" * 5000)

    task_id = enqueue_named(db_url, "stepped", queue)
    run_tasks(registry, db_url)
    env = {"TXQUEUE_DATABASE_URL": db_url}
    shown = cli("show", str(task_id), env=env)
    assert shown.returncode == 0, shown.stderr
    steps = shown.stdout.split("\nsteps")[1]
    assert "reserve" in steps and '{"seat": "12A"}' in steps
    assert "more characters: --full for all" in steps
    assert "more characters" not in cli("show", str(task_id), "--full", env=env).stdout
