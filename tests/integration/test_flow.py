"""Flow control across worker processes: 4 `txqueue worker` processes of 8 threads each,
on both stores, a limit set on the queue, and every start and end the handlers record
checked against it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import txqueue
from tests.integration import flow_app
from tests.integration.helpers import connect, consumers, count, rows, wait_until
from tests.integration.test_cli import ROOT, TXQUEUE

WORKERS = 4
THREADS = 8


@dataclass(frozen=True)
class Span:
    id: str
    key: str
    start: float
    end: float
    pid: int


def spans(folder: Path) -> list[Span]:
    out = []
    for f in folder.glob("*.log"):
        for line in f.read_text().splitlines():
            i, key, start, end, pid = line.split()
            out.append(Span(i, key, float(start), float(end), int(pid)))
    return sorted(out, key=lambda s: s.start)


def busiest_second(starts: list[float]) -> int:
    """The most starts in a window of one second, taken from each start on."""
    starts = sorted(starts)
    return max(sum(1 for t in starts[i:] if t < first + 1.0) for i, first in enumerate(starts))


def most_at_once(found: list[Span]) -> int:
    """The most spans running at one moment (an end before a start at the same instant)."""
    events = sorted([(s.start, 1) for s in found] + [(s.end, -1) for s in found])
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


@contextmanager
def workers(
    db_url: str,
    amqp_url: str,
    queue: str,
    folder: Path,
    app: str = "registry",
    threads: int = THREADS,
) -> Iterator[None]:
    """The worker processes, on ``tests.integration.flow_app``'s ``app`` registry."""
    env = {
        **os.environ,
        "TXQUEUE_DATABASE_URL": db_url,
        "TXQUEUE_AMQP_URL": amqp_url,
        "TXQUEUE_TEST_QUEUE": queue,
        "TXQUEUE_TEST_RECORD_DIR": str(folder),
    }
    argv = [
        *TXQUEUE,
        "worker",
        "--app",
        f"tests.integration.flow_app:{app}",
        "--concurrency",
        str(threads),
    ]
    procs = [
        subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        for _ in range(WORKERS)
    ]
    try:
        wait_until(lambda: consumers(amqp_url, queue) == WORKERS, timeout=60, every=0.2)
        yield
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        errors = [p.communicate(timeout=30)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    assert not any("Traceback" in e for e in errors), errors


def enqueue(
    db_url: str,
    queue: str,
    n: int,
    seconds: float = 0.0,
    key: str = "",
    one_by_one: bool = False,
    name: str = "span",
) -> None:
    """``n`` tasks in one transaction, or each in its own (a wake-up each, spread over the
    workers)."""
    task = txqueue.Task(name, {"key": key, "seconds": seconds}, queue=queue)
    with closing(connect(db_url)) as c:
        for batch in [[task]] * n if one_by_one else [[task] * n]:
            with txqueue.transaction(c):
                txqueue.enqueue_many(c, batch)


def change(db_url: str, fn: object, queue: str, **limits: object) -> float:
    """Apply a change and commit it; the moment it committed."""
    with closing(connect(db_url)) as c:
        fn(c, queue, **limits)  # type: ignore[operator]
        c.commit()
    return time.time()


def ran_once_each(db_url: str, folder: Path, total: int) -> list[Span]:
    wait_until(lambda: count(db_url, "state = 'succeeded'") == total, timeout=120, every=0.2)
    found = spans(folder)
    assert len(found) == total and len({s.id for s in found}) == total
    return found


def test_a_concurrency_limit_of_five_holds_across_every_worker(
    db_url: str, amqp_url: str, queue: str, tmp_path: Path
) -> None:
    change(db_url, txqueue.limit_queue, queue, concurrency=5)
    # Three threads a worker: five at once takes two workers, so the limit is held across
    # them (with eight, one worker quick to claim, as beside a CPU hog, could take all).
    with workers(db_url, amqp_url, queue, tmp_path, threads=3):
        enqueue(db_url, queue, 60, seconds=0.2, one_by_one=True)
        found = ran_once_each(db_url, tmp_path, 60)
    assert most_at_once(found) == 5
    assert len({s.pid for s in found}) > 1


def test_a_rate_limit_of_fifty_a_second_holds_in_every_second(
    db_url: str, amqp_url: str, queue: str, tmp_path: Path
) -> None:
    change(db_url, txqueue.limit_queue, queue, rate_limit="50/s")
    with workers(db_url, amqp_url, queue, tmp_path):
        enqueue(db_url, queue, 550)
        found = ran_once_each(db_url, tmp_path, 550)
    # The claims, which the limit counts (see the rate key's test below).
    assert busiest_second([r["start_time"].timestamp() for r in rows(db_url)]) <= 50
    starts = [s.start for s in found]
    assert starts[-1] - starts[0] >= 9.8  # ten seconds' worth, held to the rate


def test_a_concurrency_key_of_one_never_runs_two_of_a_key_at_once(
    db_url: str, amqp_url: str, queue: str, tmp_path: Path
) -> None:
    keys = [f"account-{i}" for i in range(6)]
    with workers(db_url, amqp_url, queue, tmp_path, "keyed"):
        for _ in range(8):
            for key in keys:
                enqueue(db_url, queue, 1, seconds=0.05, key=key, name="one_per_key")
        found = ran_once_each(db_url, tmp_path, 8 * len(keys))
    for key in keys:
        assert most_at_once([s for s in found if s.key == key]) == 1, key
    assert most_at_once(found) > 1  # the keys ran side by side
    assert len({s.pid for s in found}) > 1


def test_a_rate_key_holds_each_key_to_its_rate_across_every_worker(
    db_url: str, amqp_url: str, queue: str, tmp_path: Path
) -> None:
    with workers(db_url, amqp_url, queue, tmp_path, "keyed"):
        for key in ("token-a", "token-b"):
            enqueue(db_url, queue, 30, key=key, name="ten_a_second")
        found = ran_once_each(db_url, tmp_path, 60)
    # Read from the rows' claims, which the limit counts: when a claimed task's handler
    # starts is the machine's scheduling (a loaded suite once started one 0.1 s late, next
    # to its key's next one on time: 12 handler starts in a second from 10 claims).
    claimed = rows(db_url)
    for key in ("token-a", "token-b"):
        at = [r["start_time"].timestamp() for r in claimed if r["payload"]["key"] == key]
        assert busiest_second(at) <= 10, key
    starts = sorted(s.start for s in found)
    assert 2.5 <= starts[-1] - starts[0] < 5.0  # each key at its own rate, side by side


def test_fair_share_starts_a_small_tenants_tasks_within_a_second_behind_a_big_backlog(
    db_url: str, amqp_url: str, queue: str, tmp_path: Path
) -> None:
    change(db_url, txqueue.limit_queue, queue, fair_share=True)
    tenant = flow_app.per_tenant.options(queue=queue)
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        txqueue.enqueue_many(c, [tenant.task("big", seconds=0.02) for _ in range(10_000)])
    with workers(db_url, amqp_url, queue, tmp_path, "fair"):
        wait_until(lambda: len(spans(tmp_path)) >= 500, timeout=60, every=0.05)
        with closing(connect(db_url)) as c, txqueue.transaction(c):
            for _ in range(10):
                tenant.enqueue(c, "small", seconds=0.02)
        sent = time.time()
        wait_until(lambda: sum(s.key == "small" for s in spans(tmp_path)) == 10, every=0.05)
        backlog = count(db_url, "state = 'pending'")
        # Fair share ended, the running workers go back to the plain poll and drain on.
        change(db_url, txqueue.limit_queue, queue, fair_share=False)
        ended = count(db_url, "state = 'succeeded'")
        wait_until(lambda: count(db_url, "state = 'succeeded'") > ended + 300, every=0.05)
        change(db_url, txqueue.pause_queue, queue)  # the rest stays: a quick end
    small = [s.start for s in spans(tmp_path) if s.key == "small"]
    assert max(small) - sent < 1.0
    assert backlog > 2000  # the small tenant's tasks went ahead of the big one's backlog


def test_a_pause_stops_every_worker_within_a_second_and_a_resume_restarts_them(
    db_url: str, amqp_url: str, queue: str, tmp_path: Path
) -> None:
    enqueue(db_url, queue, 3000, seconds=0.1)
    with workers(db_url, amqp_url, queue, tmp_path):
        # Every worker busy before the pause: one still starting up (its first poll after
        # the first hundred tasks, in a loaded suite) would show nothing before it.
        wait_until(
            lambda: len(found := spans(tmp_path)) >= 100 and len({s.pid for s in found}) == WORKERS,
            timeout=30,
            every=0.05,
        )
        paused = change(db_url, txqueue.pause_queue, queue)
        time.sleep(2.5)
        resuming = time.time()  # its commit may start tasks before change() returns
        resumed = change(db_url, txqueue.resume_queue, queue)
        txqueue.flush()
        wait_until(lambda: any(s.start > resumed for s in spans(tmp_path)), every=0.05)
        time.sleep(1.5)
        change(db_url, txqueue.pause_queue, queue)  # the rest stays: a quick end
    found = spans(tmp_path)
    pids = {s.pid for s in found}
    assert len(pids) == WORKERS
    # No claim once the pause has committed (a claim under way as it committed may still
    # take its tasks), read from the rows: when a claimed task's handler starts is the
    # machine's scheduling, which a loaded suite can delay by a second or more.
    at = "to_timestamp(%s)" if db_url.startswith("postgresql") else "%s"
    window = f"start_time > {at} AND start_time < {at}" % (paused + 0.25, resuming)
    assert count(db_url, window) == 0
    for pid in pids:
        before = [s.start for s in found if s.pid == pid and s.start < paused]
        after = [s.start for s in found if s.pid == pid and s.start > resuming]
        assert before and after
        assert after[0] - resumed < 1.0, pid
    assert count(db_url, "state = 'pending' AND attempts > 0") == 0  # none cost an attempt


def test_a_change_is_the_callers_to_commit_or_roll_back(db_url: str) -> None:
    with closing(connect(db_url)) as conn:
        txqueue.pause_queue(conn, "mail")
        txqueue.limit_queue(conn, "mail", concurrency=2)
        assert txqueue.get_queue(conn, "mail") == txqueue.QueueSettings(
            "mail", paused=True, concurrency=2
        )
        conn.rollback()
        assert txqueue.list_queues(conn) == []
        txqueue.limit_queue(conn, "mail", rate_limit="5/10s")
        conn.commit()
    with closing(connect(db_url)) as other:
        assert txqueue.get_queue(other, "mail").rate == "5/10s"
