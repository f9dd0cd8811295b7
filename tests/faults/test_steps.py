"""Durable steps under SIGKILL: a worker killed at every boundary of a task's atomic steps
(before each, inside each after its write, after the last) leaves each step's ledger row
exactly once, and the next attempt resumes at the first step not recorded; then a plain
step records the total, in threads and in a process pool's children alike."""

from __future__ import annotations

import time
from contextlib import closing

import txqueue
from txqueue import Task

from ..integration.helpers import connect, count
from ..store.kinds import POOLS_ON_EVERY_SERVER
from .apps import STEPS
from .conftest import Workers, summarize

POINTS = [
    *(f"{where}:{n}" for n in range(1, STEPS + 1) for where in ("before", "inside")),
    "end",
]
"""Where the first attempt of each task has its worker killed."""


ONE_AT_A_TIME = ("--concurrency", "1", "--poll-interval", "0.05")
"""A worker that runs one task at a time, and looks for more often."""


def _first_after_the_kill(point: str) -> int:
    """The first step the attempt after the kill runs (the ones before it are recorded)."""
    return STEPS + 1 if point == "end" else int(point.split(":")[1])


@POOLS_ON_EVERY_SERVER
def test_a_worker_killed_at_every_step_boundary_leaves_each_effect_exactly_once(
    db_url: str, queue: str, workers: Workers, pool: str
) -> None:
    workers.serving(db_url, queue, pool)
    with closing(connect(db_url)) as c:
        c.execute("CREATE TABLE ledger (task_id text NOT NULL, n integer NOT NULL)")
        ids = {txqueue.enqueue(c, Task("ledger", {"kill": p}, queue=queue)): p for p in POINTS}
        c.commit()
    started = time.monotonic()
    # One task at a time, so each kill costs one task its first attempt: a worker is
    # started again after each, until every task has ended.
    deaths = workers.restarted(
        lambda: count(db_url, "state IN ('succeeded', 'failed')") == len(ids), *ONE_AT_A_TIME
    )
    took = time.monotonic() - started
    assert deaths == len(POINTS)

    with closing(connect(db_url)) as c:
        rows = [(str(r[0]), int(r[1])) for r in c.execute("SELECT task_id, n FROM ledger")]
        infos = {i: txqueue.get_task(c, i) for i in ids}
    # Every step's effect once: none lost with a killed transaction, none written twice.
    assert sorted(rows) == sorted((str(i), n) for i in ids for n in range(1, STEPS + 1))
    for task_id, point in ids.items():
        info = infos[task_id]
        assert (info.state, info.result) == ("succeeded", 6), point
        # An attempt after the killed one resumed where it was killed: the steps before
        # were the killed attempt's, and not run again. (Attempts may come between, or
        # after: one claimed ahead by a worker that another task's kill took, before its
        # start, or after its steps but before the recorder wrote its success.)
        entries = [f"entry {n}" for n in range(1, STEPS + 1)]
        assert [s.name for s in info.steps] == [*entries, "total"]
        first = _first_after_the_kill(point)
        before = {s.attempt for s in info.steps[: first - 1]}
        after = {s.attempt for s in info.steps[first - 1 :]}  # the plain step's included
        assert len(before) <= 1 and len(after) == 1, point
        assert all(a < min(after) for a in before), point
    summarize(
        f"durable steps ({db_url.split(':')[0]}, {pool}): a worker SIGKILLed at each of "
        f"{len(POINTS)} step boundaries, {len(rows)} ledger rows for {len(ids)} x {STEPS} "
        f"steps, every task resumed at its first step not recorded ({took:.1f}s)"
    )


@POOLS_ON_EVERY_SERVER
def test_a_worker_killed_around_a_sleep_and_a_wait_delivers_each_signal_once(
    db_url: str, queue: str, workers: Workers, pool: str
) -> None:
    workers.serving(db_url, queue, pool)
    points = ["before", "slept", "received", "nowhere"]
    with closing(connect(db_url)) as c:
        c.execute("CREATE TABLE ledger (task_id text NOT NULL, n integer NOT NULL)")
        ids = {txqueue.enqueue(c, Task("courier", {"kill": p}, queue=queue)): p for p in points}
        c.commit()
    parcels = {task_id: n for n, task_id in enumerate(ids, start=100)}
    sent: list[int] = []

    def send_once_all_wait() -> None:
        if not sent and count(db_url, "state = 'parked' AND wait_key IS NOT NULL") == len(ids):
            with closing(connect(db_url)) as c, txqueue.transaction(c):
                sent.extend(txqueue.signal(c, f"parcel:{i}", n) for i, n in parcels.items())
            assert sent == [1] * len(ids)  # each woke its task

    started = time.monotonic()
    deaths = workers.restarted(
        lambda: count(db_url, "state = 'succeeded'") == len(ids),
        *ONE_AT_A_TIME,
        each=send_once_all_wait,
    )
    took = time.monotonic() - started
    assert deaths == len(points) - 1

    with closing(connect(db_url)) as c:
        rows = sorted((str(r[0]), int(r[1])) for r in c.execute("SELECT task_id, n FROM ledger"))
        infos = {i: txqueue.get_task(c, i) for i in ids}
        kept = c.execute("SELECT count(*) FROM txqueue_signals").fetchone()
    assert rows == sorted((str(i), n) for i, n in parcels.items())  # each parcel once
    assert kept is not None and kept[0] == 0  # each signal taken, by its own wait
    for task_id, point in ids.items():
        info = infos[task_id]
        assert (info.state, info.result) == ("succeeded", parcels[task_id]), point
        wait = f"wait parcel:{task_id}"
        assert [s.name for s in info.steps] == ["sleep 1", f"{wait} until", wait, "deliver"]
    summarize(
        f"sleeps and waits ({db_url.split(':')[0]}, {pool}): a worker SIGKILLed before a "
        f"sleep, after it and after its wait took its signal; {len(rows)} deliveries for "
        f"{len(ids)} signals, each once ({took:.1f}s)"
    )


@POOLS_ON_EVERY_SERVER
def test_a_worker_killed_around_a_child_runs_each_child_once_and_resumes_its_parent(
    db_url: str, queue: str, workers: Workers, pool: str
) -> None:
    workers.serving(db_url, queue, pool)
    points = ["before", "started", "child", "returned", "nowhere"]
    with closing(connect(db_url)) as c:
        c.execute("CREATE TABLE ledger (task_id text NOT NULL, n integer NOT NULL)")
        ids = {
            txqueue.enqueue(c, Task("dispatcher", {"kill": p, "n": n}, queue=queue)): (p, n)
            for n, p in enumerate(points, start=100)
        }
        c.commit()
    started = time.monotonic()
    # One handler thread: a parent waiting for its child must not hold it.
    deaths = workers.restarted(
        lambda: count(db_url, "name = 'dispatcher' AND state = 'succeeded'") == len(ids),
        *ONE_AT_A_TIME,
    )
    took = time.monotonic() - started
    assert deaths == len(points) - 1

    with closing(connect(db_url)) as c:
        rows = sorted((str(r[0]), int(r[1])) for r in c.execute("SELECT task_id, n FROM ledger"))
        infos = {i: txqueue.get_task(c, i) for i in ids}
        kept = c.execute("SELECT count(*) FROM txqueue_signals").fetchone()
        packers = c.execute("SELECT count(*) FROM txqueue_tasks WHERE name = 'packer'").fetchone()
    assert rows == sorted((str(i), 2 * n) for i, (_, n) in ids.items())  # each once
    assert packers is not None and packers[0] == len(ids)  # each child enqueued once
    assert kept is not None and kept[0] == 0  # each child's end taken by its parent
    for task_id, (point, n) in ids.items():
        info = infos[task_id]
        assert (info.state, info.result) == ("succeeded", 2 * n), point
        child = info.steps[0].result
        wait = f"wait task:{child}"
        assert [s.name for s in info.steps] == ["child 1", f"{wait} until", wait, "deliver"]
    summarize(
        f"children ({db_url.split(':')[0]}, {pool}): a worker SIGKILLed before a child's "
        f"start, after it, in the child and after its result came back; {len(rows)} "
        f"deliveries, {packers[0]} children for {len(ids)} parents ({took:.1f}s)"
    )
