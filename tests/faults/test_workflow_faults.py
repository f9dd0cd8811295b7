"""Workflows under the fault suite's faults: DAGs of mixed shapes enqueued by producers that
roll a quarter back, while workers are killed and frozen, the broker and the database are
cut, and the server terminates the workers' sessions."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

import txqueue
from txqueue import Task

from ..integration.helpers import count, rows, wait_until
from ..partition import RABBITMQ
from .conftest import Workers, summarize
from .proxy import Proxy
from .test_faults import LOST, terminate_worker_backends

pytestmark = pytest.mark.xdist_group("faults")


def shape(rnd: random.Random, queue: str) -> txqueue.Workflow:
    """A chain, a fan-out joined, or a diamond with a tail; one in five has a step that
    fails for good somewhere inside."""
    flow = txqueue.Workflow("faulty")

    def step(*after: txqueue.Step[Any]) -> txqueue.Step[Any]:
        task = Task("record", {"sleep": rnd.uniform(0.02, 0.1)}, queue=queue)
        return flow.add(task, after=after)

    kind = rnd.choice(["chain", "fan", "diamond"])
    first = step()
    if kind == "chain":
        last = first
        for _ in range(rnd.randint(2, 5)):
            last = step(last)
    elif kind == "fan":
        step(*[step(first) for _ in range(rnd.randint(2, 8))])
    else:
        step(step(step(first), step(first)))
    if rnd.random() < 0.2:
        inner = rnd.choice(flow.steps[:-1])
        doomed = flow.add(Task("doomed", queue=queue), after=[inner])
        step(doomed, flow.steps[-2])
    return flow


class WorkflowProducers:
    """Business transactions enqueuing a workflow each, a quarter rolled back, until
    ``stop()``: the workers have steps to hold through every fault, however slow the
    machine."""

    def __init__(self, db_url: str, queue: str, threads: int, transactions: int) -> None:
        self.db_url, self.queue = db_url, queue
        self._stop = threading.Event()
        self.committed: list[txqueue.Workflow] = []
        self.rolled_back: list[txqueue.Workflow] = []
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._produce, args=(transactions, seed))
            for seed in range(threads)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(120)

    def _produce(self, transactions: int, seed: int) -> None:
        rnd = random.Random(seed)
        with psycopg.connect(self.db_url) as c:
            for _ in range(transactions):
                if self._stop.is_set():
                    return
                flow = shape(rnd, self.queue)
                roll = rnd.random() < 0.25
                txqueue.enqueue_workflow(c, flow)  # its first steps woken before the end
                if roll:
                    c.rollback()
                else:
                    c.commit()
                with self._lock:
                    (self.rolled_back if roll else self.committed).append(flow)
                time.sleep(rnd.uniform(0.01, 0.06))


@RABBITMQ
def test_every_step_of_a_committed_workflow_runs_after_its_parents_and_no_rolled_back_one_does(
    services: tuple[str, str],
    pg_url: str,
    queue: str,
    pg_proxy: Proxy,
    mq_proxy: Proxy,
    workers: Workers,
    tmp_path: Path,
) -> None:
    amqp_url = services[1]
    workers.env.update(
        TXQUEUE_DATABASE_URL=pg_proxy.url(pg_url),
        TXQUEUE_AMQP_URL=mq_proxy.url(amqp_url),
        TXQUEUE_TEST_QUEUE=queue,
        TXQUEUE_TEST_LEASE="2",
    )
    args = ("--concurrency", "4", "--poll-interval", "0.5", "--shutdown-timeout", "10")
    args += ("--no-cleaner",)
    procs = [workers.start(*args) for _ in range(3)]
    cleaner = workers.cleaner(pg_url, amqp_url)  # its own path, not through the proxies
    txqueue.configure(amqp_url=mq_proxy.url(amqp_url))
    producers = WorkflowProducers(pg_url, queue, threads=4, transactions=1000)
    faults: Counter[str] = Counter()
    killed: dict[int, list[str]] = {}
    try:
        producers.start()
        timeline: list[tuple[float, Any]] = [
            (1.5, lambda: killed.update({procs[0].pid: workers.kill_holding(procs[0], pg_url)})),
            (1.6, lambda: procs.append(workers.start(*args))),
            (3.0, mq_proxy.cut),
            (5.0, mq_proxy.restore),
            # Longer than the 2 s lease: what the cut-off workers hold is recovered, and
            # the outcomes they write once the database is back are fenced out.
            (5.5, pg_proxy.cut),
            (8.5, pg_proxy.restore),
            (9.0, lambda: faults.update(backends_terminated=terminate_worker_backends(pg_url))),
            (9.5, lambda: killed.update({procs[1].pid: workers.kill_holding(procs[1], pg_url)})),
            (9.6, lambda: procs.append(workers.start(*args))),
            (10.5, lambda: None),  # the last of the producers' transactions
        ]
        started = time.monotonic()
        for at, fault in timeline:
            time.sleep(max(0.0, started + at - time.monotonic()))
            fault()
        producers.stop()
        wait_until(
            lambda: count(pg_url, "state IN ('pending', 'running', 'waiting')") == 0,
            timeout=120,
            every=0.2,
        )
    finally:
        cleaner.terminate()
        cleaner.wait(30)
        txqueue.configure()
    codes = workers.stop_all()
    assert [
        c for p, c in zip(workers.procs, codes, strict=True) if p.pid not in workers.killed
    ] == [
        0,
        0,
        0,
    ]

    table = {r["id"]: r for r in rows(pg_url)}
    runs = workers.starts()
    ran = {uuid.UUID(task_id) for task_id, *_ in runs}
    # No step of a rolled-back workflow ran, or is there.
    gone = {s.id for flow in producers.rolled_back for s in flow}
    assert not ran & gone and not set(table) & gone
    # Every step of a committed workflow is there; it succeeded if its parents did (and it
    # is not doomed), else it never ran and says which parent blocked it.
    steps = {s.id: s for flow in producers.committed for s in flow}
    assert set(table) == set(steps)
    outcomes: Counter[str] = Counter()
    for step_id, s in steps.items():
        row = table[step_id]
        parents_ok = all(table[p.id]["state"] == "succeeded" for p in s.parents)
        if not parents_ok:
            assert row["state"] == "cancelled" and step_id not in ran, row
            last = row["events"][-1]
            assert last["move"] == "blocked" and last["reason"].startswith("parent "), last
            assert any(f"({p.id})" in last["reason"] for p in s.parents), last
            outcomes["blocked"] += 1
        elif s.task.name == "doomed":
            assert row["state"] == "failed", row
            outcomes["doomed"] += 1
        else:
            assert row["state"] == "succeeded", row
            outcomes["succeeded"] += 1
    # No step started before all its parents had succeeded.
    finished = {i: r["finished_at"] for i, r in table.items()}
    for task_id, _, _, at in runs:
        s = steps[uuid.UUID(task_id)]
        for p in s.parents:
            assert finished[p.id] is not None
            assert datetime.fromtimestamp(at, finished[p.id].tzinfo) >= finished[p.id], (s, p)
    # No attempt ran twice; an earlier run is there only because its worker died or lost
    # the lease, and then fenced out.
    attempts = [(task_id, attempt) for task_id, attempt, _, _ in runs]
    assert len(attempts) == len(set(attempts))
    by_task: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for task_id, attempt, pid, _ in runs:
        by_task[task_id].append((attempt, pid))
    reruns: Counter[str] = Counter()
    for task_id, tries in by_task.items():
        row = table[uuid.UUID(task_id)]
        lost = {e["attempt"]: e["type"] for e in row["errors"]}
        for attempt, pid in tries:
            if attempt == row["attempts"]:
                continue
            if pid in workers.killed:
                reruns["worker killed"] += 1
            else:
                assert lost.get(attempt) in LOST, (task_id, attempt, row["errors"])
                reruns["lease lost"] += 1
    assert faults["backends_terminated"] >= 1 and killed
    summarize(
        f"workflows: {len(producers.committed)} committed ({len(steps)} steps: "
        f"{dict(outcomes)}), {len(producers.rolled_back)} rolled back and never run; "
        f"{len(runs)} handler runs, reruns {dict(reruns) or 0}; faults {dict(faults)}, "
        f"sigkill holding {sum(map(len, killed.values()))}, broker cuts {mq_proxy.cuts}, "
        f"database cuts {pg_proxy.cuts}"
    )
    with closing(psycopg.connect(pg_url)) as c:
        states = Counter(txqueue.get_workflow(c, f.id).state for f in producers.committed)
    assert set(states) <= {"succeeded", "failed"}, states
