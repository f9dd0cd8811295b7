"""Atomic tasks on each store: the handler's work on ctx.conn commits with the task's
success, or not at all."""

from __future__ import annotations

import uuid
from contextlib import closing
from typing import Any

import pytest

import txqueue
from txqueue import Task

from .helpers import connect, count, execute, rows, running, wait_until

PARAM = {"postgres": "%s", "sqlite": "?"}


def _param(db_url: str) -> str:
    return PARAM["sqlite" if db_url.startswith("sqlite") else "postgres"]


def _ledger(db_url: str) -> None:
    execute(db_url, "CREATE TABLE ledger (task_id text PRIMARY KEY, amount int NOT NULL)")


def _worker(db_url: str, queue: str, handler: Any, **options: Any) -> txqueue.Worker:
    registry = txqueue.Registry()
    registry.task("apply", queue=queue, atomic=True, max_attempts=1, **options)(handler)
    return txqueue.Worker(registry, database_url=db_url, concurrency=4)


def _enqueue(db_url: str, queue: str, n: int) -> list[uuid.UUID]:
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        return txqueue.enqueue_many(c, [Task("apply", {"i": i}, queue=queue) for i in range(n)])


def _finished(db_url: str, n: int) -> None:
    wait_until(lambda: count(db_url, "state IN ('succeeded', 'failed')") == n)


def test_the_work_commits_with_the_success(db_url: str, queue: str) -> None:
    _ledger(db_url)
    p = _param(db_url)

    def apply(payload: dict[str, int], ctx: txqueue.TaskContext) -> int:
        ctx.conn.execute(f"INSERT INTO ledger VALUES ({p}, {p})", (str(ctx.id), payload["i"]))
        return payload["i"]

    worker = _worker(db_url, queue, apply)
    with running(worker):
        ids = _enqueue(db_url, queue, 40)
        _finished(db_url, 40)
    assert {r["result"] for r in rows(db_url)} == set(range(40))
    assert count(db_url, "state = 'succeeded'") == 40
    assert sorted(r[0] for r in _select(db_url, "SELECT task_id FROM ledger")) == sorted(
        str(i) for i in ids
    )
    assert worker.stats["succeeded"] == 40
    assert not worker._board.recording


def test_a_failed_handler_leaves_no_work_and_its_failure_recorded(db_url: str, queue: str) -> None:
    _ledger(db_url)
    p = _param(db_url)

    def apply(payload: dict[str, int], ctx: txqueue.TaskContext) -> None:
        ctx.conn.execute(f"INSERT INTO ledger VALUES ({p}, 1)", (str(ctx.id),))
        raise RuntimeError("after the insert")

    with running(_worker(db_url, queue, apply)):
        _enqueue(db_url, queue, 5)
        _finished(db_url, 5)
    assert count(db_url, "state = 'failed'") == 5
    assert all(r["errors"][-1]["message"] == "after the insert" for r in rows(db_url))
    assert _select(db_url, "SELECT count(*) FROM ledger") == [(0,)]


def test_a_lost_lease_rolls_the_work_back(db_url: str, queue: str) -> None:
    """The fence fails when the task is no longer this attempt's; here the handler moves
    it on itself, as a recovery and a new claim elsewhere would have."""
    _ledger(db_url)
    p = _param(db_url)

    def apply(payload: dict[str, int], ctx: txqueue.TaskContext) -> None:
        ctx.conn.execute(f"INSERT INTO ledger VALUES ({p}, 1)", (str(ctx.id),))
        ctx.conn.execute(
            f"UPDATE txqueue_tasks SET attempts = attempts + 1 WHERE id = {p}",
            (str(ctx.id) if p == "?" else ctx.id,),
        )

    worker = _worker(db_url, queue, apply)
    with running(worker):
        [task_id] = _enqueue(db_url, queue, 1)
        wait_until(lambda: worker.stats["fenced_out"] == 1)
    [row] = rows(db_url)
    assert (row["state"], row["attempts"]) == ("running", 1)  # left to the cleaner
    assert _select(db_url, "SELECT count(*) FROM ledger") == [(0,)]
    assert worker.stats["succeeded"] == 0
    assert row["id"] == task_id


def test_atomic_takes_a_plain_handler_with_its_context() -> None:
    registry = txqueue.Registry()
    with pytest.raises(txqueue.ConfigError, match="atomic handler"):
        registry.task("one", atomic=True)(lambda payload: None)

    async def later(payload: Any, ctx: txqueue.TaskContext) -> None:
        return None

    with pytest.raises(txqueue.ConfigError, match="atomic handler"):
        registry.task("two", atomic=True)(later)
    with pytest.raises(txqueue.InvalidTypeError, match=r"^atomic: "):
        registry.task("three", atomic="yes")  # type: ignore[arg-type]


def _select(db_url: str, sql: str) -> list[tuple[Any, ...]]:
    with closing(connect(db_url)) as c:
        return [tuple(r) for r in c.execute(sql).fetchall()]


def test_sqlalchemy_core_statements_run_on_ctx_conn_as_the_readme_shows(
    db_url: str, queue: str
) -> None:
    import sqlalchemy as sa
    from sqlalchemy.dialects import postgresql, sqlite

    _ledger(db_url)
    ledger = sa.Table(
        "ledger", sa.MetaData(), sa.Column("task_id", sa.Text), sa.Column("amount", sa.Integer)
    )
    # The README's recipe: compiled for the store's driver, with named parameters.
    dialect = (
        sqlite.dialect(paramstyle="named")
        if db_url.startswith("sqlite")
        else postgresql.psycopg.dialect()
    )

    def apply(payload: dict[str, int], ctx: txqueue.TaskContext) -> None:
        statements: list[Any] = [sa.insert(ledger).values(task_id=str(ctx.id), amount=payload["i"])]
        if payload["i"] == 3:
            statements.append(
                sa.update(ledger).where(ledger.c.task_id == str(ctx.id)).values(amount=-1)
            )
        for stmt in statements:
            compiled = stmt.compile(dialect=dialect)
            ctx.conn.execute(str(compiled), compiled.params)
        if payload["i"] == 4:
            raise RuntimeError("rolled back with its work")

    with running(_worker(db_url, queue, apply)):
        _enqueue(db_url, queue, 5)
        _finished(db_url, 5)
    amounts = sorted(r[0] for r in _select(db_url, "SELECT amount FROM ledger"))
    assert amounts == [-1, 0, 1, 2]
    assert count(db_url, "state = 'failed'") == 1
