"""Fault-suite fixtures: proxies to cut, worker processes to kill, business transactions to
run under the faults, and a summary of counts."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

import txqueue
from txqueue import Task

from ..conftest import note
from ..integration.helpers import rows
from .proxy import Proxy

ROOT = Path(__file__).resolve().parents[2]
WORKER = (sys.executable, "-m", "txqueue", "worker", "--app", "tests.faults.apps:registry")


def summarize(line: str) -> None:
    """A count for the run's summary, under "fault suite counts"."""
    note("fault suite counts", line)


def _proxy_for(url: str, default_port: int) -> Iterator[Proxy]:
    proxy = Proxy(urlsplit(url).port or default_port, urlsplit(url).hostname or "127.0.0.1")
    yield proxy
    proxy.close()


@pytest.fixture
def pg_proxy(pg_url: str) -> Iterator[Proxy]:
    """A proxy to the server of the test's database (the shared one, or PostgreSQL 18)."""
    yield from _proxy_for(pg_url, 5432)


@pytest.fixture
def mq_proxy(services: tuple[str, str]) -> Iterator[Proxy]:
    yield from _proxy_for(services[1], 5672)


class Workers:
    """`txqueue worker` processes on the fault registry, each logging to its own file."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.tmp_path = tmp_path
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")}
        self.env.update(env, TXQUEUE_TEST_RECORD_DIR=str(tmp_path))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.killed: set[int] = set()
        self.pool = "threads"  # or "processes": the handlers run in each worker's children

    def start(self, *args: str, prefix: Sequence[str] = ()) -> subprocess.Popen[bytes]:
        """A worker with ``args``; ``prefix`` runs it elsewhere (``ip netns exec NS``)."""
        log = open(self.tmp_path / f"worker-{len(self.procs)}.out", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [*prefix, *WORKER, "--pool", self.pool, *args],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def serving(self, db_url: str, queue: str, pool: str = "threads") -> None:
        """The workers started next serve ``queue`` of ``db_url`` in ``pool``, with the
        fault registry's tasks on a 2 s lease."""
        self.pool = pool
        self.env.update(
            TXQUEUE_DATABASE_URL=db_url, TXQUEUE_TEST_QUEUE=queue, TXQUEUE_TEST_LEASE="2"
        )

    def restarted(
        self, done: Callable[[], bool], *args: str, each: Callable[[], object] = lambda: None
    ) -> int:
        """Run a worker with ``args``, started again each time it dies (a handler killed
        it), until ``done()``, calling ``each()`` between looks; how many died."""
        started = time.monotonic()
        deaths = 0
        proc = self.start(*args)
        while not done():
            assert time.monotonic() - started < 90, "the tasks did not all end"
            if proc.poll() is not None:
                deaths += 1
                proc = self.start(*args)
            each()
            time.sleep(0.05)
        return deaths

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        self.killed.add(proc.pid)

    def cleaner(self, db_url: str, amqp_url: str) -> subprocess.Popen[bytes]:
        """``txqueue cleaner --loop`` beside the workers, on its own path to the services
        (not through the workers' proxies), logging to cleaner.out."""
        with (self.tmp_path / "cleaner.out").open("wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "txqueue", "cleaner", "--loop", "--interval", "0.5"],
                cwd=ROOT,
                env={**self.env, "TXQUEUE_DATABASE_URL": db_url, "TXQUEUE_AMQP_URL": amqp_url},
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill_holding(self, proc: subprocess.Popen[bytes], db_url: str) -> list[str]:
        """SIGKILL the worker while it holds a task: freeze it, look, kill or thaw. The ids
        of the tasks it held. A worker still starting (a loaded machine) is let start
        first: frozen five times in six, it would take minutes to."""
        self._started(proc)
        holds = f"state = 'running' AND worker_id LIKE '%:{proc.pid}:%'"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            proc.send_signal(signal.SIGSTOP)
            time.sleep(0.05)  # statements it had sent finish server-side
            held = [str(r["id"]) for r in rows(db_url, holds)]
            if held:
                self.kill(proc)
                return held
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.01)
        raise AssertionError("the worker never held a task")

    def freeze(self, proc: subprocess.Popen[bytes], db_url: str) -> None:
        """SIGSTOP the worker, at a moment it holds no write transaction of SQLite's: one
        frozen mid-write would hold the database's one write lock, and every other writer
        wait for it (what SQLite is, not what the test is after). Thawed and frozen again
        until then; on PostgreSQL at once."""
        deadline = time.monotonic() + 15
        while True:
            proc.send_signal(signal.SIGSTOP)
            if not db_url.startswith("sqlite") or _writable(db_url):
                return
            if time.monotonic() > deadline:
                raise AssertionError("the worker never let go of the SQLite write lock")
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.01)

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        return (self.tmp_path / f"worker-{self.procs.index(proc)}.out").read_text()

    def stop_all(self) -> list[int | None]:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                self._started(proc)
                proc.send_signal(signal.SIGTERM)
        codes = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(30))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                codes.append(None)
        return codes

    def _started(self, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
        """Wait until a worker has its SIGTERM handler: one still importing (just started,
        on a loaded machine) would be ended by the signal itself, with -15, which is not
        the shutdown a test means to check. Bounded: a worker that never comes up is
        signalled all the same, and its exit code says so."""
        deadline = time.monotonic() + timeout
        while proc.poll() is None and "on queues" not in self.output(proc):
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)

    def runs(self) -> list[tuple[str, int, int]]:
        """Every handler start, from every process: (task id, attempt, pid)."""
        return [(task_id, attempt, pid) for task_id, attempt, pid, _ in self.starts()]

    def starts(self) -> list[tuple[str, int, int, float]]:
        """Every handler start: (task id, attempt, pid, time.time() as it started, or 0.0
        for a task that does not note it)."""
        out = []
        for path in self.tmp_path.glob("*.log"):
            text = path.read_text()
            # A line without its end was cut by a SIGKILL inside its write (the kernel stops
            # a write at a page boundary for one): its handler died before its work.
            for line in text[: text.rfind("\n") + 1].splitlines():
                task_id, attempt, pid, *when = line.split()
                out.append((task_id, int(attempt), int(pid), float(when[0]) if when else 0.0))
        return out


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    group = Workers(tmp_path, {})
    yield group
    group.stop_all()


class Producers:
    """Business transactions on several threads: a few tasks each, a quarter rolled back
    after their wake-ups were already sent."""

    def __init__(self, db_url: str, queue: str, threads: int, transactions: int) -> None:
        self.db_url, self.queue = db_url, queue
        self.committed: list[uuid.UUID] = []
        self.rolled_back: list[uuid.UUID] = []
        self.transactions = 0
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._produce, args=(transactions, seed))
            for seed in range(threads)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def join(self) -> None:
        for t in self._threads:
            t.join(120)

    def _produce(self, transactions: int, seed: int) -> None:
        rnd = random.Random(seed)
        with psycopg.connect(self.db_url) as c:
            for _ in range(transactions):
                # Each producer is a tenant: its tasks take their turns in a fair-share queue.
                tasks = [
                    Task(
                        "record",
                        {"sleep": rnd.uniform(0.002, 0.03)},
                        queue=self.queue,
                        concurrency_key=f"tenant:{seed}",
                    )
                    for _ in range(rnd.randint(1, 5))
                ]
                roll = rnd.random() < 0.25
                if rnd.random() < 0.5 and not roll:
                    with txqueue.transaction(c):  # wake-ups after the commit
                        ids = txqueue.enqueue_many(c, tasks)
                else:  # wake-ups at once, before the commit or the rollback
                    ids = [txqueue.enqueue(c, t) for t in tasks]
                    if roll:
                        c.rollback()
                    else:
                        c.commit()
                with self._lock:
                    (self.rolled_back if roll else self.committed).extend(ids)
                    self.transactions += 1
                time.sleep(rnd.uniform(0.01, 0.06))


def _writable(db_url: str) -> bool:
    """No connection holds the SQLite database's write lock now."""
    conn = sqlite3.connect(urlsplit(db_url).path, timeout=0.2, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()
