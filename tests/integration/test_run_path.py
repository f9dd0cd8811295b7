"""One run path: a task's attempt ends the same way whether a worker's handler thread runs
it or ``txqueue.testing.run_tasks`` does on the test's thread, on each store. Each test
runs under both (``run``), and asserts on the rows and what ``on_failed`` was told."""

from __future__ import annotations

import logging
import uuid
from contextlib import closing
from typing import Any

import txqueue
from txqueue import Registry, Task
from txqueue.observability.logs import TaskLogFilter
from txqueue.testing import run_tasks

from .conftest import Run
from .helpers import connect, execute, rows


def _enqueue(db_url: str, *tasks: Task) -> list[uuid.UUID]:
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        return txqueue.enqueue_many(c, list(tasks))


def _ledger(db_url: str) -> str:
    execute(db_url, "CREATE TABLE ledger (task_id text PRIMARY KEY)")
    return "?" if db_url.startswith("sqlite") else "%s"


def _ledger_rows(db_url: str) -> int:
    with closing(connect(db_url)) as c:
        return int(c.execute("SELECT count(*) FROM ledger").fetchone()[0])


def test_arguments_that_do_not_fit_fail_for_good_without_a_retry(
    run: Run, db_url: str, queue: str
) -> None:
    failures: list[txqueue.FailedTask] = []
    registry = Registry(on_failed=failures.append)

    @registry.task("receipt", queue=queue, max_attempts=5)
    def receipt(order_id: int) -> None:
        pass

    _enqueue(db_url, Task("receipt", {"order_id": 1, "extra": 2}, queue=queue))
    run(registry, db_url)
    [row] = rows(db_url)
    assert (row["state"], row["attempts"]) == ("failed", 1)
    assert [(f.name, f.reason) for f in failures] == [
        ("receipt", "its arguments do not fit the handler")
    ]


def test_a_failing_atomic_task_rolls_its_work_back_and_alerts(
    run: Run, db_url: str, queue: str
) -> None:
    p = _ledger(db_url)
    failures: list[txqueue.FailedTask] = []
    registry = Registry(on_failed=failures.append)

    @registry.task("apply", queue=queue, atomic=True, max_attempts=1, context=True)
    def apply(ctx: txqueue.TaskContext) -> None:
        ctx.conn.execute(f"INSERT INTO ledger VALUES ({p})", (str(ctx.id),))
        raise RuntimeError("after the insert")

    _enqueue(db_url, Task("apply", {}, queue=queue))
    run(registry, db_url)
    [row] = rows(db_url)
    assert row["state"] == "failed" and row["errors"][-1]["message"] == "after the insert"
    assert _ledger_rows(db_url) == 0
    assert [(f.name, f.reason) for f in failures] == [("apply", "attempts exhausted")]


def test_an_atomic_task_whose_lease_is_lost_rolls_its_work_back(
    run: Run, db_url: str, queue: str
) -> None:
    """Inline, its success was once written anyway (and its work kept): the worker's
    fence was not checked."""
    p = _ledger(db_url)
    registry = Registry()

    @registry.task("apply", queue=queue, atomic=True, context=True)
    def apply(ctx: txqueue.TaskContext) -> None:
        ctx.conn.execute(f"INSERT INTO ledger VALUES ({p})", (str(ctx.id),))
        # Moves the task on, as a recovery and a claim elsewhere would have.
        ctx.conn.execute(
            f"UPDATE txqueue_tasks SET attempts = attempts + 1 WHERE id = {p}",
            (str(ctx.id) if p == "?" else ctx.id,),
        )

    _enqueue(db_url, Task("apply", {}, queue=queue))
    run(registry, db_url)
    [row] = rows(db_url)
    assert (row["state"], row["attempts"]) == ("running", 1)  # left to the cleaner
    assert _ledger_rows(db_url) == 0


def test_system_exit_from_an_async_handler_fails_the_attempt(
    run: Run, db_url: str, queue: str
) -> None:
    """Inline, it once escaped ``run_tasks`` and left the task running."""
    registry = Registry()

    @registry.task("leave", queue=queue, max_attempts=2, backoff=60)
    async def leave() -> None:
        raise SystemExit(3)

    _enqueue(db_url, Task("leave", {}, queue=queue))
    run(registry, db_url)
    [row] = rows(db_url)
    assert (row["state"], row["attempts"]) == ("pending", 1)
    assert row["errors"][-1]["type"].endswith("SystemExit")


def test_a_handlers_log_records_name_its_task(run: Run, db_url: str, queue: str) -> None:
    """Inline, they once carried no task fields."""
    seen: list[logging.LogRecord] = []
    capture = logging.Handler()
    capture.emit = seen.append  # type: ignore[method-assign]
    capture.addFilter(TaskLogFilter())
    logger = logging.getLogger(f"test.run_path.{queue}")
    logger.addHandler(capture)
    registry = Registry()
    registry.task("say", queue=queue)(lambda: logger.warning("hello"))
    [task_id] = _enqueue(db_url, Task("say", {}, queue=queue))
    try:
        run(registry, db_url)
    finally:
        logger.removeHandler(capture)
    got: Any = [(r.task_id, r.task_name, r.attempt) for r in seen]  # type: ignore[attr-defined]
    assert got == [(str(task_id), "say", 1)]


def test_a_fair_share_queue_runs_inline_key_by_key(db_url: str, queue: str) -> None:
    registry = Registry()
    ran: list[str] = []

    @registry.task("per_tenant", queue=queue, concurrency_key="key")
    def per_tenant(key: str) -> None:
        ran.append(key)

    with closing(connect(db_url)) as c:
        txqueue.limit_queue(c, queue, fair_share=True)
        c.commit()
    _enqueue(db_url, *(per_tenant.task(k) for k in ["big", "big", "big", "small"]))
    run_tasks(registry, db_url)
    assert ran == ["big", "small", "big", "big"]
