"""Start deadlines (``expires``) on each store: a task claimed past its deadline fails for
good without its handler being called, whatever held it back, with its reason in its
history and for ``on_failed``."""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import closing
from datetime import UTC, datetime, timedelta

import txqueue
from txqueue import Task

from .helpers import connect, running, wait_until


def test_a_backlog_longer_than_the_deadline_starts_none_of_the_expired_tasks(
    db_url: str, queue: str
) -> None:
    started: list[int] = []
    failed: list[txqueue.FailedTask] = []
    release = threading.Event()
    registry = txqueue.Registry(on_failed=failed.append)

    @registry.task("block", queue=queue)
    def block() -> None:
        release.wait(30)

    @registry.task("work", queue=queue)
    def work(n: int) -> None:
        started.append(n)

    @registry.task("stale", queue=queue, expires=0.5)  # a registered default
    def stale(n: int) -> None:
        started.append(n)

    worker = txqueue.Worker(registry, database_url=db_url, concurrency=1)
    soon = datetime.now(UTC) + timedelta(seconds=0.5)
    with running(worker), closing(connect(db_url)) as c:
        with txqueue.transaction(c):
            blocker = block.enqueue(c)
        wait_until(lambda: txqueue.get_task(c, blocker).state == "running", timeout=10)
        c.commit()
        with txqueue.transaction(c):
            expiring = [
                *(work.options(expires=0.5).enqueue(c, n) for n in range(5)),
                work.options(expires=soon).enqueue(c, 5),
                *(txqueue.enqueue(c, Task("stale", {"n": n}, queue=queue)) for n in (6, 7)),
            ]
            kept = [work.options(expires=timedelta(minutes=5)).enqueue(c, n) for n in (8, 9)]
            kept.append(work.enqueue(c, 10))
        time.sleep(1.0)  # the backlog outlasts the deadlines
        release.set()
        for task_id in [*expiring, *kept]:
            txqueue.wait(c, task_id, timeout=30)
        infos = {i: txqueue.get_task(c, i) for i in [*expiring, *kept]}

    assert sorted(started) == [8, 9, 10]
    for task_id in expiring:
        info = infos[task_id]
        assert (info.state, info.attempts) == ("failed", 1), info
        assert info.errors[-1]["type"] == "txqueue.errors.TaskExpiredError"
        assert "not started by its start deadline" in info.errors[-1]["message"]
        assert info.events[-1].to_state == "failed"
        assert "TaskExpiredError" in (info.events[-1].reason or "")
        assert info.start_time is not None
        if info.name == "work":  # the registry's deadline is applied by the claim
            assert info.start_by is not None and info.start_by <= info.start_time
    assert infos[expiring[0]].start_by == infos[expiring[0]].run_at + timedelta(seconds=0.5)
    assert infos[expiring[5]].start_by == soon
    assert infos[expiring[6]].start_by is None
    assert all(infos[i].state == "succeeded" for i in kept)
    wait_until(lambda: len(failed) == len(expiring), timeout=10)
    assert {f.id for f in failed} == set(expiring)
    assert {f.reason for f in failed} == {"expired"}


def test_a_retry_past_an_instant_deadline_is_not_run(db_url: str, queue: str) -> None:
    runs: list[uuid.UUID] = []
    registry = txqueue.Registry()

    @registry.task("flaky", queue=queue, backoff=lambda _: 6.0, max_attempts=5, context=True)
    def flaky(ctx: txqueue.TaskContext) -> None:
        runs.append(ctx.id)
        raise RuntimeError("down")

    # Room for a loaded machine's worker to start and take the first attempt in time.
    deadline = datetime.now(UTC) + timedelta(seconds=5)
    with running(txqueue.Worker(registry, database_url=db_url)), closing(connect(db_url)) as c:
        with txqueue.transaction(c):
            task_id = flaky.options(expires=deadline).enqueue(c)
        info = txqueue.wait(c, task_id, timeout=30)

    assert len(runs) == 1  # the retry came due after the deadline
    assert (info.state, info.attempts) == ("failed", 2)
    assert [e["type"] for e in info.errors] == [
        "builtins.RuntimeError",
        "txqueue.errors.TaskExpiredError",
    ]
