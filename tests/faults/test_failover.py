"""Promises 1, 3, 4 and 5 across a PostgreSQL failover. A primary and a streaming standby of
the test's own serve producers, workers, a cleaner, a dashboard and a waiter, all given both
servers in one URL with ``target_session_attrs=read-write``; the primary is killed with
SIGKILL under load, the standby promoted, and none of them restarted.

With synchronous replication nothing whose COMMIT returned is lost. With asynchronous
replication what the standby had not received when the primary died is lost: whole
transactions, the application's rows with their tasks, never one without the other. The
test makes that window certain by stopping the primary's WAL sender for the last moments
before the kill.

The clusters run with ``fsync=off``: a killed process loses nothing the kernel holds, so it
changes nothing here but the time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field

import httpx
import psycopg
import pytest

import txqueue
from txqueue import Task
from txqueue.errors import TxQueueError
from txqueue.store import POSTGRES

from ..integration.cluster import Server, cluster, standby
from ..integration.helpers import free_port, wait_until
from ..partition import RABBITMQ
from .conftest import ROOT, Workers, summarize

pytestmark = pytest.mark.xdist_group("faults")

LEASE = 3.0
SETTINGS = {"wal_level": "replica", "max_wal_senders": "5", "fsync": "off"}
# The cleaner runs apart (a loop of its own, every second) through the failover.
ARGS = ("--concurrency", "4", "--poll-interval", "1", "--shutdown-timeout", "10", "--no-cleaner")
TARGET = 2.0  # seconds from promotion to the first claim, at most


@dataclass
class Producers:
    """Business transactions on threads until told to stop: an order and its task each, a
    quarter rolled back after the wake-up was sent. A transaction whose COMMIT raised is in
    doubt (it may have committed before the connection broke); the thread reconnects."""

    url: str
    queue: str
    threads: int = 4
    committed: dict[str, float] = field(default_factory=dict)  # task id: when COMMIT returned
    rolled_back: set[str] = field(default_factory=set)
    in_doubt: set[str] = field(default_factory=set)
    failures: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(n,)) for n in range(self.threads)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def join(self) -> None:
        self.stop.set()
        for t in self._threads:
            t.join(60)

    def _run(self, seed: int) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                with psycopg.connect(self.url, connect_timeout=3) as c:
                    while not self.stop.is_set():
                        n += 1
                        self._transaction(c, roll=(n + seed) % 4 == 0)
                        time.sleep(0.01)
            except (psycopg.Error, TxQueueError):
                with self._lock:
                    self.failures += 1
                time.sleep(0.05)

    def _transaction(self, c: psycopg.Connection[object], roll: bool) -> None:
        task_id = str(txqueue.enqueue(c, Task("record", {"sleep": 0.02}, queue=self.queue)))
        c.execute("INSERT INTO orders (id, task_id) VALUES (%s, %s)", (uuid.uuid4(), task_id))
        if roll:
            c.rollback()
            with self._lock:
                self.rolled_back.add(task_id)
            return
        with self._lock:
            self.in_doubt.add(task_id)
        c.commit()
        with self._lock:
            self.in_doubt.discard(task_id)
            self.committed[task_id] = time.time()


@contextmanager
def pair(sync: bool) -> Iterator[tuple[Server, Server]]:
    with cluster(**SETTINGS) as primary:
        with closing(POSTGRES.connect(primary.url())) as c:
            POSTGRES.apply_schema(c)
            c.execute("CREATE TABLE orders (id uuid PRIMARY KEY, task_id uuid NOT NULL)")
        with standby(primary, "standby1", **SETTINGS) as replica:
            mode = "sync" if sync else "async"
            with closing(psycopg.connect(primary.url(), autocommit=True)) as c:
                if sync:
                    c.execute("ALTER SYSTEM SET synchronous_standby_names = 'standby1'")
                    c.execute("SELECT pg_reload_conf()")
                query = "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s"
                wait_until(lambda: c.execute(query, ("standby1",)).fetchone() == (mode,), 30, 0.05)
            yield primary, replica


def sender(server: Server) -> int:
    """The pid of the process that streams a primary's WAL to its standby."""
    pid = (server.data / "postmaster.pid").read_text().split()[0]
    found = subprocess.run(
        ["pgrep", "-P", pid, "-f", "walsender"], capture_output=True, text=True, check=True
    )
    return int(found.stdout.split()[0])


def read(url: str, sql: str) -> list[tuple[object, ...]]:
    with closing(psycopg.connect(url)) as c:
        return c.execute(sql).fetchall()


def spawn(workers: Workers, name: str, *argv: str) -> subprocess.Popen[bytes]:
    with open(workers.tmp_path / f"{name}.out", "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "txqueue", *argv],
            cwd=ROOT,
            env=workers.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@pytest.mark.parametrize(
    ("replication", "rabbitmq"),
    [
        pytest.param("sync", True, marks=RABBITMQ),
        pytest.param("async", True, marks=RABBITMQ),
        ("sync", False),
    ],
    ids=["sync", "async", "sync-notify"],
)
def test_a_killed_primary_fails_over_to_its_standby_keeping_every_promise(
    replication: str, rabbitmq: bool, services: tuple[str, str], queue: str, workers: Workers
) -> None:
    """``rabbitmq`` False: woken by NOTIFY, each listener listening again on the new
    primary."""
    sync = replication == "sync"
    amqp_url = services[1] if rabbitmq else ""
    with pair(sync) as (primary, replica):
        url = (
            f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{replica.port}"
            "/postgres?target_session_attrs=read-write"
        )
        workers.env.update(
            TXQUEUE_TEST_QUEUE=queue,
            TXQUEUE_TEST_LEASE=str(LEASE),
            TXQUEUE_DATABASE_URL=url,
            TXQUEUE_AMQP_URL=amqp_url,
        )
        procs = [workers.start(*ARGS) for _ in range(2)]
        # Given the standby alone: read-only until promoted, it must say so and claim nothing.
        misled = workers.start(*ARGS, "--database-url", replica.url())
        port = free_port()
        others = [
            spawn(workers, "cleaner", "cleaner", "--loop", "--interval", "1"),
            spawn(workers, "dashboard", "dashboard", "--port", str(port)),
        ]
        txqueue.configure(amqp_url=amqp_url or None)
        producers = Producers(url, queue)
        try:
            wait_until(lambda: all("on queues" in workers.output(p) for p in procs), 60)
            producers.start()
            wait_until(lambda: len(workers.runs()) >= 150, 60, 0.05)
            # Tasks that ripen while the primary is down, one of them waited for across it.
            with closing(psycopg.connect(url)) as c, txqueue.transaction(c):
                backlog = {
                    str(i)
                    for i in txqueue.enqueue_many(
                        c, [Task("record", {}, queue=queue, delay=1.2) for _ in range(40)]
                    )
                }
            awaited = next(iter(backlog))
            waited: list[object] = []
            waiter = threading.Thread(
                target=lambda: waited.append(txqueue.wait(url, awaited, timeout=90))
            )
            waiter.start()
            if not sync:  # the window: commits the standby will never receive
                seen = f"SELECT count(*) FROM txqueue_tasks WHERE id = '{awaited}'"
                wait_until(lambda: read(replica.url(), seen) == [(1,)], 10, 0.01)
                # Stopped, it sends nothing more (the standby's receiver would still read
                # what the kernel had buffered for it).
                os.kill(sender(primary), signal.SIGSTOP)
                time.sleep(0.5)
            primary.kill()
            killed = time.time()
            time.sleep(1.0)  # an outage long enough for every part to notice
            promoting = time.time()
            replica.promote()
            promoted = time.time()
            time.sleep(3.0)  # producers and workers on the new primary
            producers.join()
            present = {
                str(task_id): (state, errors)
                for task_id, state, errors in read(
                    url, "SELECT id, state, errors FROM txqueue_tasks"
                )
            }
            orders = {str(t) for (t,) in read(url, "SELECT task_id FROM orders")}
            wait_until(
                lambda: (
                    read(url, "SELECT count(*) FROM txqueue_tasks WHERE state <> 'succeeded'")
                    == [(0,)]
                ),
                60,
                0.1,
            )
            waiter.join(30)
            page = httpx.get(f"http://127.0.0.1:{port}/", timeout=10)
            lived = [proc.poll() for proc in others]
        finally:
            producers.join()
            txqueue.configure()
            for proc in others:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
        assert workers.stop_all() == [0, 0, 0]

    # The dashboard, the waiter and the cleaner (whose loop outlives the outage) carried on.
    assert lived == [None, None]
    assert page.status_code == 200 and queue in page.text
    assert [getattr(w, "state", None) for w in waited] == ["succeeded"]
    runs = workers.starts()
    ran = {t for t, _, _, _ in runs}
    committed = set(producers.committed)
    lost = committed - set(present)
    # The standby alone was read-only until promoted: it said so, and claimed nothing then.
    assert "read-only" in workers.output(misled)
    assert not [r for r in runs if r[2] == misled.pid and r[3] < promoting]
    # Promise 3: nothing rolled back is there, or ran.
    assert not producers.rolled_back & (set(present) | ran)
    # What is lost is lost whole: a task is there exactly when its order is.
    ours = set(present) - backlog
    assert ours == orders
    if sync:  # Promise 1: every COMMIT that returned, there and run.
        assert not lost
    else:
        # The commits the standby never received: whole transactions, after it stopped.
        assert lost, "the standby received everything: the window was not made"
        assert not lost & orders
    assert set(present) <= ran
    assert ours <= committed | producers.in_doubt
    # Promise 4 and 5: a task ran again only because its lease was lost in the failover
    # (recovered by the cleaner after it), or, without synchronous replication, because
    # the claim itself was lost with the primary; never twice with one lease.
    by_task: dict[str, list[tuple[int, int, float]]] = defaultdict(list)
    for task_id, attempt, pid, when in runs:
        by_task[task_id].append((attempt, pid, when))
    reruns = {t: r for t, r in by_task.items() if len(r) > 1}
    for task_id, attempts in reruns.items():
        first = min(when for _, _, when in attempts)
        assert first < killed, (task_id, attempts)
        if sync:
            assert len({a for a, _, _ in attempts}) == len(attempts), attempts
            recovered = {e["attempt"] for e in present[task_id][1]}
            assert all(a in recovered for a, _, _ in sorted(attempts)[:-1]), attempts
    # Measured from `pg_ctl promote`, by the workers given both servers.
    pids = {p.pid for p in procs}
    first_claim = min(w for _, _, pid, w in runs if w > promoting and pid in pids) - promoting
    first_commit = min(w for w in producers.committed.values() if w > promoting) - promoting
    assert first_claim < TARGET
    summarize(
        f"failover ({replication}{'' if rabbitmq else ', woken by NOTIFY'}): "
        f"{len(committed)} committed, "
        f"{len(producers.rolled_back)} rolled back, {len(lost)} lost with the old primary, "
        f"{len(producers.in_doubt)} in doubt; {len(reruns)} run again; after `pg_ctl promote` "
        f"(which took {promoted - promoting:.2f}s) the first claim came in {first_claim:.2f}s, "
        f"the first commit in {first_commit:.2f}s"
    )
