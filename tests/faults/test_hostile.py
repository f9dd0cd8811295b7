"""Hostile handlers: whatever a handler returns, raises or does to its process, every task
ends in a final state with its reason, none runs twice except after its process died, and
the worker (or, after os._exit, its restart) keeps draining."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import closing
from typing import Any

import pytest

import txqueue
from txqueue import Task

from ..integration.helpers import connect, rows
from .conftest import Workers, summarize

pytestmark = pytest.mark.xdist_group("faults")

HOSTILE = ("nul", "broken_str", "system_exit", "keyboard_interrupt", "unserializable", "huge")


def _enqueue(db_url: str, tasks: list[Task]) -> list[str]:
    with closing(connect(db_url, autocommit=True)) as conn:
        return [str(i) for i in txqueue.enqueue_many(conn, tasks)]


def _drain(db_url: str, ids: list[str], cleaner: txqueue.Cleaner, timeout: float = 60) -> None:
    """Wait for every task in ``ids`` to be final, running the cleaner as cron would."""
    deadline = time.monotonic() + timeout
    while True:
        left = {str(r["id"]): r["state"] for r in rows(db_url, "state IN ('pending', 'running')")}
        if not left.keys() & set(ids):
            return
        assert time.monotonic() < deadline, Counter(left.values())
        cleaner.run_once()
        time.sleep(0.3)


def test_hostile_handlers_end_final_and_never_wedge_the_worker(
    db_url: str, queue: str, workers: Workers
) -> None:
    # The limit raised past the default 1 MiB: a 10 MB result is stored, and holds up no
    # other outcome.
    workers.env.update(
        TXQUEUE_DATABASE_URL=db_url, TXQUEUE_TEST_QUEUE=queue, TXQUEUE_MAX_JSON_BYTES=str(16 << 20)
    )
    cleaner = txqueue.Cleaner(database_url=db_url, amqp_url=None)
    first = workers.start("--concurrency", "4")
    hostile = _enqueue(
        db_url,
        [Task("hostile", {"do": d}, queue=queue) for d in HOSTILE]
        + [Task("hostile_async", queue=queue), Task("outlives_its_timeout", queue=queue)],
    )
    plain = _enqueue(db_url, [Task("record", queue=queue) for _ in range(40)])
    _drain(db_url, hostile + plain, cleaner)
    by_id: dict[str, dict[str, Any]] = {str(r["id"]): r for r in rows(db_url)}
    outcome = {
        by_id[i]["name"] + ":" + (by_id[i]["payload"] or {}).get("do", ""): (
            by_id[i]["state"],
            (by_id[i]["errors"] or [{}])[-1].get("type"),
            (by_id[i]["errors"] or [{}])[-1].get("message", ""),
        )
        for i in hostile
    }
    assert outcome["hostile:nul"][:1] == ("failed",)
    assert "NUL" in outcome["hostile:nul"][2]
    assert outcome["hostile:broken_str"][1:] == (
        "tests.faults.apps._Unprintable",
        "<str() of the _Unprintable failed>",
    )
    assert outcome["hostile:system_exit"][:2] == ("failed", "builtins.SystemExit")
    assert outcome["hostile:keyboard_interrupt"][:2] == ("failed", "builtins.KeyboardInterrupt")
    assert outcome["hostile_async:"][:2] == ("failed", "builtins.SystemExit")
    assert outcome["hostile:unserializable"][0] == "failed"
    assert "JSON" in outcome["hostile:unserializable"][2]
    assert outcome["hostile:huge"][0] == "succeeded"
    assert outcome["outlives_its_timeout:"][0] == "succeeded"
    huge = next(i for i in hostile if by_id[i]["payload"].get("do") == "huge")
    assert len(by_id[huge]["result"]) == 10_000_000
    assert all(by_id[i]["state"] == "succeeded" for i in plain)
    assert first.poll() is None, workers.output(first)  # nothing above took the worker down

    # os._exit: the process is gone mid-task; its supervisor (here, the test) restarts it,
    # and the cleaner recovers the task once its 1 s lease has run out.
    [doomed] = _enqueue(db_url, [Task("exits_hard", queue=queue)])
    deadline = time.monotonic() + 30
    while first.poll() is None:
        assert time.monotonic() < deadline, "the worker did not exit"
        time.sleep(0.05)
    restarted = workers.start("--concurrency", "4")
    after = _enqueue(db_url, [Task("record", queue=queue) for _ in range(20)])
    _drain(db_url, [doomed, *after], cleaner)
    final = {str(r["id"]): r for r in rows(db_url)}
    assert final[doomed]["state"] == "succeeded" and final[doomed]["attempts"] == 2
    assert all(final[i]["state"] == "succeeded" for i in after)
    assert restarted.poll() is None, workers.output(restarted)

    starts = Counter(task_id for task_id, _, _ in workers.runs())
    twice = {i: n for i, n in starts.items() if n != 1}
    assert twice == {doomed: 2}, twice
    assert set(starts) == {*hostile, *plain, doomed, *after}
    summarize(
        f"hostile handlers ({db_url.split(':')[0]}): {len(hostile)} hostile and "
        f"{len(plain) + len(after)} plain tasks final, each run once; the os._exit task "
        "ran twice, across a worker restart"
    )
