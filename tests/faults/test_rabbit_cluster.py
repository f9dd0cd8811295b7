"""Wake-ups through a three-node RabbitMQ cluster with quorum queues, while the node that
leads the workers' queue is killed with SIGKILL under load and then started again: workers
and the publisher are given all three nodes in one URL, and none of them is restarted.

The database is the truth: no task may be lost whatever the broker does. What the broker's
failover costs is latency, measured here: how long wake-ups stopped, how long tasks waited
for a poll meanwhile, and whether an enqueue ever waited for the broker.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from pathlib import Path

import pika
import psycopg
import pytest

import txqueue
from txqueue import Task
from txqueue.broker.link import queue_arguments

from ..integration.helpers import count, rows, wait_until
from ..integration.rabbit import Node, await_node, private_node
from ..partition import RABBITMQ
from .conftest import Workers, summarize

pytestmark = [pytest.mark.xdist_group("faults"), RABBITMQ]

POLL = 2.0  # long beside a wake-up's milliseconds, so the two are told apart
WOKEN = POLL / 4  # a task started sooner than this after its commit was woken
ARGS = ("--concurrency", "4", "--poll-interval", str(POLL), "--shutdown-timeout", "10")


def _listens(folder: Path, port: int) -> str:
    return f"listeners.tcp.default = 127.0.0.1:{port}\n"


@pytest.fixture(scope="module")
def rabbit_cluster() -> Iterator[list[Node]]:
    """Three nodes joined into one cluster, stopped and deleted afterwards."""
    with ExitStack() as stack:
        nodes = [stack.enter_context(private_node(_listens, prefix="txqha")) for _ in range(3)]
        for node in nodes:
            await_node(node)
        for node in nodes[1:]:
            for step in (("stop_app",), ("join_cluster", nodes[0].name), ("start_app",)):
                done = node.ctl(*step)
                assert done.returncode == 0, (step, done.stdout, done.stderr)
        yield nodes


def leader(nodes: list[Node], queue: str) -> Node:
    """The node where the quorum queue ``txqueue.<queue>`` has its leader now."""
    for node in nodes:
        if node.process is None or node.process.poll() is not None:
            continue
        listed = node.ctl("list_queues", "name", "leader", "--quiet", "--no-table-headers")
        for line in listed.stdout.splitlines():
            name, _, where = line.partition("\t")
            if name == f"txqueue.{queue}":
                return next(n for n in nodes if n.name == where.strip())
    raise AssertionError(f"no leader for txqueue.{queue}")


@dataclass
class Load:
    """One task per transaction at a steady rate, from this process's App; the time each
    commit returned, and the longest an enqueue took."""

    app: txqueue.App
    db_url: str
    queue: str
    committed: dict[str, float] = field(default_factory=dict)
    rolled_back: set[str] = field(default_factory=set)
    slowest: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self.stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        n = 0
        with closing(psycopg.connect(self.db_url)) as c:
            while not self.stop.is_set():
                n += 1
                began = time.monotonic()
                task_id = str(self.app.enqueue(c, Task("record", {}, queue=self.queue)))
                self.slowest = max(self.slowest, time.monotonic() - began)
                if n % 5 == 0:
                    c.rollback()
                    self.rolled_back.add(task_id)
                else:
                    c.commit()
                    self.committed[task_id] = time.time()
                time.sleep(0.02)


# Three nodes' boots, a kill and a restart: about 65 s on an idle machine, and the 120 s of
# the suite's timeout (which counts the fixture's boots too) is not enough on a loaded one.
@pytest.mark.timeout(300)
def test_killing_the_queue_leaders_node_loses_nothing_and_wakeups_resume(
    rabbit_cluster: list[Node], pg_url: str, queue: str, workers: Workers
) -> None:
    nodes = rabbit_cluster
    url = "amqp://guest:guest@" + ",".join(f"127.0.0.1:{n.port}" for n in nodes) + "/"
    workers.env.update(
        TXQUEUE_TEST_QUEUE=queue,
        TXQUEUE_DATABASE_URL=pg_url,
        TXQUEUE_AMQP_URL=url,
        TXQUEUE_AMQP_QUEUE_TYPE="quorum",
    )
    # Declared from the first node, the queue has its leader there (RabbitMQ's default
    # placement), where the workers and the publisher connect first: the kill takes the
    # queue's leader and every client's connection at once.
    first = f"amqp://guest:guest@127.0.0.1:{nodes[0].port}/"
    with closing(pika.BlockingConnection(pika.URLParameters(first))) as conn:
        arguments = queue_arguments("quorum", conn._impl.server_properties)
        conn.channel().queue_declare(f"txqueue.{queue}", durable=True, arguments=arguments)
    procs = [workers.start(*ARGS) for _ in range(2)]
    app = txqueue.App(database_url=pg_url, amqp_url=url, queue_type="quorum")
    load = Load(app, pg_url, queue)
    try:
        wait_until(lambda: all("consuming txqueue." in workers.output(p) for p in procs), 60)
        load.start()
        time.sleep(3.0)
        victim = leader(nodes, queue)
        assert victim is nodes[0]
        victim.kill()
        killed = time.time()
        time.sleep(8.0)
        victim.start()
        await_node(victim)
        restarted = time.time()
        time.sleep(4.0)
        load.join()
        wait_until(lambda: count(pg_url, "state <> 'succeeded'") == 0, 60, 0.1)
    finally:
        load.join()
        app.close()
    assert [p.poll() for p in procs] == [None, None]  # never restarted
    for proc in procs:  # its connection was on the node killed: it moved to another
        assert f"lost or refused at amqp://guest:***@127.0.0.1:{victim.port}/" in (
            workers.output(proc)
        )
    assert workers.stop_all() == [0, 0]

    table = {str(r["id"]): r for r in rows(pg_url)}
    runs = workers.runs()
    # Nothing lost, nothing rolled back run, no attempt run twice.
    assert set(table) == set(load.committed)
    assert not {t for t, _, _ in runs} & load.rolled_back
    assert len(runs) == len({(t, a) for t, a, _ in runs}) == len(table)
    # A wake-up starts a task within milliseconds; during the failover some waited for a
    # poll. Wake-ups flowed again soon after the kill, and after the restart.
    waited = {
        task_id: (row["start_time"].timestamp() - load.committed[task_id])
        for task_id, row in table.items()
    }
    after_kill = sorted(
        (load.committed[t], w) for t, w in waited.items() if load.committed[t] > killed
    )
    resumed = next(
        (
            when - killed
            for i, (when, _) in enumerate(after_kill)
            if all(w < WOKEN for _, w in after_kill[i : i + 10])
        ),
        float("inf"),
    )
    polled = [w for _, w in after_kill if w >= WOKEN]
    before = [w for t, w in waited.items() if load.committed[t] < killed]
    late = [w for t, w in waited.items() if load.committed[t] > restarted]
    assert resumed < 5, resumed
    assert statistics.median(late) < WOKEN
    assert load.slowest < 0.5  # an enqueue never waits for the broker
    status = nodes[0].ctl("cluster_status")
    assert all(n.name in status.stdout for n in nodes)
    summarize(
        f"RabbitMQ cluster: killed {victim.name} (the queue's leader) under load; "
        f"{len(load.committed)} committed tasks all succeeded, {len(load.rolled_back)} rolled "
        f"back never ran; wake-ups flowed again {resumed:.1f}s after the kill; {len(polled)} "
        f"tasks waited for a poll meanwhile (longest {max(polled, default=0):.1f}s); commit to "
        f"start median {statistics.median(before) * 1000:.0f} ms before, "
        f"{statistics.median(late) * 1000:.0f} ms after the restart; slowest enqueue "
        f"{load.slowest * 1000:.1f} ms"
    )
