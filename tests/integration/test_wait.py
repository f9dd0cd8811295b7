"""txqueue.wait and wait_async, on each store: by URL and on the application's connection."""

from __future__ import annotations

import asyncio
import time
import uuid
from contextlib import closing
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import txqueue
from txqueue import Task

from .helpers import connect, running
from .test_cli import cli


def _worker(db_url: str, queue: str, **options: Any) -> txqueue.Worker:
    registry = txqueue.Registry()

    @registry.task("nap", queue=queue, **options)
    def nap(payload: dict[str, Any]) -> Any:
        time.sleep(payload.get("sleep", 0))
        if payload.get("fail"):
            raise RuntimeError("asked to fail")
        return {"slept": payload.get("sleep", 0)}

    return txqueue.Worker(registry, database_url=db_url, concurrency=2)


def _enqueue(db_url: str, queue: str, **payload: Any) -> uuid.UUID:
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        return txqueue.enqueue(c, Task("nap", payload, queue=queue, max_attempts=1))


def _late(info: txqueue.TaskInfo) -> float:
    """Seconds from the outcome's commit (about its finished_at) until now."""
    assert info.finished_at is not None
    return (datetime.now(UTC) - info.finished_at).total_seconds()


def test_wait_returns_each_outcome_as_stored(db_url: str, queue: str) -> None:
    with running(_worker(db_url, queue)):
        ok = _enqueue(db_url, queue, sleep=0.3)
        bad = _enqueue(db_url, queue, fail=True)
        info = txqueue.wait(db_url, ok, timeout=10)
        late = _late(info)
        assert (info.state, info.result) == ("succeeded", {"slept": 0.3})
        failed = txqueue.wait(db_url, str(bad), timeout=10)
    assert failed.state == "failed"
    assert failed.errors[-1]["message"] == "asked to fail"
    if db_url.startswith("postgresql"):
        # Woken by the outcome's notification, well before the one-second fallback read.
        assert late < 0.25, late


def test_wait_on_the_applications_connection(db_url: str, queue: str) -> None:
    with running(_worker(db_url, queue)), closing(connect(db_url)) as c:
        task_id = _enqueue(db_url, queue, sleep=0.2)
        info = txqueue.wait(c, task_id, timeout=10)
        assert info.state == "succeeded"
        assert _late(info) < 0.6  # the polling pause is at most half a second


def test_wait_sees_a_cancelled_task(db_url: str, queue: str) -> None:
    task_id = _enqueue(db_url, queue)  # no worker: it stays pending

    def cancel_soon() -> None:
        time.sleep(0.3)
        with closing(connect(db_url)) as c, txqueue.transaction(c):
            txqueue.cancel(c, task_id)

    async def both() -> txqueue.TaskInfo:
        _, info = await asyncio.gather(
            asyncio.to_thread(cancel_soon), asyncio.to_thread(txqueue.wait, db_url, task_id, 10)
        )
        return info

    info = asyncio.run(both())
    assert info.state == "cancelled"
    if db_url.startswith("postgresql"):
        assert _late(info) < 0.25


def test_wait_gives_up_at_its_timeout_with_the_state(db_url: str, queue: str) -> None:
    task_id = _enqueue(db_url, queue)
    started = time.monotonic()
    with pytest.raises(txqueue.WaitTimeoutError) as caught:
        txqueue.wait(db_url, task_id, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 1.5
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.state == "pending"
    assert str(task_id) in str(caught.value)


def test_wait_rejects_what_cannot_be_waited_for(db_url: str) -> None:
    with pytest.raises(txqueue.TaskNotFoundError, match="no task"):
        txqueue.wait(db_url, uuid.uuid4(), timeout=1)
    with pytest.raises(txqueue.InvalidValueError, match=r"^id: "):
        txqueue.wait(db_url, "not-a-uuid")
    for timeout in (-1, float("nan"), True, "5"):
        with pytest.raises(txqueue.InvalidValueError, match=r"^timeout: "):
            txqueue.wait(db_url, uuid.uuid4(), timeout=timeout)  # type: ignore[arg-type]


def test_wait_async_by_url_and_on_an_async_connection(db_url: str, queue: str) -> None:
    late: list[float] = []

    async def main() -> list[txqueue.TaskInfo]:
        first = _enqueue(db_url, queue, sleep=0.2)
        by_url = await txqueue.wait_async(db_url, first, timeout=10)
        late.append(_late(by_url))
        if db_url.startswith("sqlite"):
            import aiosqlite

            async with aiosqlite.connect(db_url.removeprefix("sqlite:///")) as c:
                on_conn = await txqueue.wait_async(c, _enqueue(db_url, queue), timeout=10)
        else:
            async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as c:
                on_conn = await txqueue.wait_async(c, _enqueue(db_url, queue), timeout=10)
        with pytest.raises(txqueue.WaitTimeoutError):
            await txqueue.wait_async(db_url, _enqueue(db_url, "nobody"), timeout=0.2)
        return [by_url, on_conn]

    with running(_worker(db_url, queue)):
        infos = asyncio.run(main())
    assert [i.state for i in infos] == ["succeeded", "succeeded"]
    if db_url.startswith("postgresql"):
        assert late[0] < 0.25, late


def test_wait_command_prints_the_result_and_exits_by_outcome(db_url: str, queue: str) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    with running(_worker(db_url, queue)):
        ok, bad = _enqueue(db_url, queue, sleep=0.1), _enqueue(db_url, queue, fail=True)
        done = cli("wait", str(ok), "--timeout", "20", env=env)
        assert (done.returncode, done.stdout.strip()) == (0, '{"slept": 0.1}'), done.stderr
        failed = cli("wait", str(bad), "--timeout", "20", env=env)
        assert failed.returncode == 3
        assert "failed: builtins.RuntimeError: asked to fail" in failed.stderr
    pending = cli("wait", str(_enqueue(db_url, queue)), "--timeout", "0.2", env=env)
    assert pending.returncode == 5
    assert "still pending after 0.2s" in pending.stderr
    assert "Traceback" not in pending.stderr
    cancelled = _enqueue(db_url, queue)
    assert cli("cancel", str(cancelled), env=env).returncode == 0
    gone = cli("wait", str(cancelled), "--timeout", "5", env=env)
    assert gone.returncode == 4 and "cancelled" in gone.stderr, gone.stderr
    missing = cli("wait", str(uuid.uuid4()), env=env)
    assert missing.returncode == 1
    assert missing.stderr.startswith("txqueue: error: no task")
