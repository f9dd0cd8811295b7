"""Promises 1, 3, 4 and 5 across hosts: three worker "hosts" in network namespaces share a
few thousand tasks from concurrent business transactions while one of them is cut off
from PostgreSQL and RabbitMQ past its lease, or from RabbitMQ alone, or hears none of
PostgreSQL's replies, or is put on a lossy, slow link; then its network heals and it must
carry on without a restart.

How the hosts and their faults are made: ``netns.py``. The cleaner and the producers run
here, on loopback, as they would on hosts of their own that the fault spares.
"""

from __future__ import annotations

import ast
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pika
import psycopg
import pytest

import txqueue
from txqueue import Task

from ..integration.helpers import count, rows, wait_until
from ..partition import RABBITMQ
from . import netns
from .conftest import Producers, Workers, summarize
from .proxy import Proxy

pytestmark = pytest.mark.xdist_group("faults")

if (_why := netns.unavailable()) is not None:
    pytest.skip(_why, allow_module_level=True)

LEASE = 3.0  # the record task's timeout: a cut-off host loses its tasks this long after
POLL = 2.0  # long beside a wake-up's milliseconds, so the two are told apart
# The cleaner runs apart, in the test's process, beside the hosts' faults.
ARGS = (
    *("--concurrency", "4", "--poll-interval", str(POLL), "--shutdown-timeout", "10"),
    "--no-cleaner",
)
LEASE_EXPIRED = "txqueue.LeaseExpired"


@dataclass
class Site:
    """A worker host, with its forwarders to PostgreSQL and RabbitMQ on the host side."""

    net: netns.Host
    pg: Proxy
    mq: Proxy


@pytest.fixture
def sites(services: tuple[str, str]) -> Iterator[list[Site]]:
    if shutil.which("iptables") is None:
        pytest.fail(
            "the multi-host tests need iptables: apt-get install iptables (bash tests/run does)",
            pytrace=False,
        )
    netns.remove_stale()
    hosts = [netns.Host(i) for i in range(3)]
    made: list[Site] = []
    try:
        for host in hosts:
            host.create()
            made.append(
                Site(
                    host,
                    Proxy(5432, "127.0.0.1", listen=host.gateway),
                    Proxy(5672, "127.0.0.1", listen=host.gateway),
                )
            )
        yield made
    finally:
        for site in made:
            site.pg.close()
            site.mq.close()
        for host in hosts:
            host.destroy()


@dataclass
class Scene:
    """What a fault acts on: the cut-off host, its worker, and the services' URLs."""

    site: Site
    victim: subprocess.Popen[bytes]
    pg_url: str
    amqp_url: str
    queue: str
    workers: Workers
    enqueued: set[str] = field(default_factory=set)  # tasks of the fault's own


def held_by(proc: subprocess.Popen[bytes]) -> str:
    """SQL: the task's row says ``proc`` holds it (worker ids are host:pid:random)."""
    return f"worker_id LIKE '%:{proc.pid}:%'"


def lost_by(proc: subprocess.Popen[bytes]) -> str:
    """SQL: the cleaner recovered an attempt of this task from ``proc``."""
    return (
        "EXISTS (SELECT 1 FROM jsonb_array_elements(errors) e "
        f"WHERE e->>'type' = '{LEASE_EXPIRED}' AND e->>'worker_id' LIKE '%:{proc.pid}:%')"
    )


def ran_by(workers: Workers, proc: subprocess.Popen[bytes]) -> int:
    return sum(1 for _, _, pid in workers.runs() if pid == proc.pid)


def partition_past_its_lease(scene: Scene) -> str:
    """Cut the host off from both services while it holds tasks; heal once the cleaner has
    recovered them and the other hosts have finished them all."""
    site, proc, pg_url = scene.site, scene.victim, scene.pg_url
    holding = f"state = 'running' AND {held_by(proc)}"
    deadline = time.monotonic() + 60
    while True:
        wait_until(lambda: count(pg_url, holding) > 0, 30, 0.05)
        site.net.partition()
        cut = time.monotonic()
        # What it held a moment ago may have been finished just before the cut; what it
        # still holds a moment after, it can no longer finish. Without such a task, heal
        # and try again at once, while the producers still give it tasks to hold (waiting
        # a lease first, beside a busy CPU, outlasted them).
        time.sleep(0.5)
        if count(pg_url, holding) > 0:
            break
        site.net.heal()
        assert time.monotonic() < deadline, "the host never held a task across the cut"
    wait_until(lambda: count(pg_url, lost_by(proc)) > 0, LEASE + 10, every=0.1)
    wait_until(
        lambda: (
            count(pg_url, f"state = 'running' AND {held_by(proc)}") == 0
            and count(pg_url, f"state <> 'succeeded' AND {lost_by(proc)}") == 0
        ),
        timeout=60,
        every=0.1,
    )
    site.net.heal()
    return f"partitioned from both for {time.monotonic() - cut:.1f}s"


def partition_from_the_broker(scene: Scene) -> str:
    """Cut the host off from RabbitMQ alone for longer than a lease: it must go on with
    the tasks its polls find, and keep its leases. RabbitMQ must drop its consumer within
    15 s (three heartbeats of 5 s missed), so that the wake-ups it held go to the others."""
    site, proc, workers = scene.site, scene.victim, scene.workers
    wait_until(lambda: ran_by(workers, proc) > 0, 30)
    site.net.partition(site.mq.port)
    cut, before = time.monotonic(), ran_by(workers, proc)
    wait_until(lambda: broker_queue(scene.amqp_url, scene.queue)[1] < 3, 30, 0.2)
    dropped = time.monotonic() - cut
    assert dropped < 18, f"RabbitMQ kept the cut-off consumer for {dropped:.1f}s"
    wait_until(
        lambda: time.monotonic() - cut > LEASE + 1 and ran_by(workers, proc) > before, 60, 0.1
    )
    site.net.heal()
    return (
        f"partitioned from RabbitMQ for {time.monotonic() - cut:.1f}s (its consumer dropped "
        f"by RabbitMQ after {dropped:.1f}s), running {ran_by(workers, proc) - before} tasks "
        f"from its polls"
    )


TCP_USER_TIMEOUT = 30.0  # txqueue's connections give up on a statement unanswered this long


def replies_lost(scene: Scene) -> str:
    """Lose every packet PostgreSQL sends the host, while it holds tasks, for longer than
    its connections wait for an answer: its outcome writes commit, and it learns so only by
    reading the rows once healed. None of them may be reported dropped (fenced out)."""
    site, proc, pg_url, workers = scene.site, scene.victim, scene.pg_url, scene.workers
    # Once it has written an outcome, its write is a prepared statement, sent whole: before,
    # preparing it takes a round trip of its own, whose lost reply stops the write unsent.
    wait_until(lambda: count(pg_url, f"state = 'succeeded' AND {held_by(proc)}") > 0, 30, 0.05)
    # Cut while it runs a task of a second: its outcome is written during the cut. (A task
    # it holds is not enough: the reply of the claim itself may be what the cut loses.)
    for _ in range(30):  # one at a time, until one starts on this host
        with psycopg.connect(pg_url) as c, txqueue.transaction(c):
            slow = str(txqueue.enqueue(c, Task("record", {"sleep": 1.0}, queue=scene.queue)))
        scene.enqueued.add(slow)
        wait_until(lambda: any(t == slow for t, _, _ in workers.runs()), 30, 0.02)  # noqa: B023
        if any(t == slow and p == proc.pid for t, _, p in workers.runs()):
            break
    else:
        raise AssertionError("no task of a second ever started on the host")
    site.net.lose_replies(site.pg.port)
    cut = time.monotonic()
    time.sleep(TCP_USER_TIMEOUT + 5)
    site.net.heal()
    landed = "outcome written before the connection was lost"
    wait_until(lambda: landed in workers.output(proc), 30, 0.1)
    return (
        f"lost PostgreSQL's replies for {time.monotonic() - cut:.1f}s, and found "
        f"{workers.output(proc).count(landed)} outcomes written without an answer"
    )


PROBE = """
import sys, time, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as c:
    for _ in range(20):
        t = time.monotonic()
        c.execute("SELECT repeat('x', 3000)").fetchone()
        print(time.monotonic() - t)
"""


def lossy_and_slow(scene: Scene) -> str:
    """Lose 5% of the host's packets each way and cap its link at 512 kbit/s, for longer
    than a lease and until it has run tasks through it."""
    site, proc, pg_url, workers = scene.site, scene.victim, scene.pg_url, scene.workers
    wait_until(lambda: ran_by(workers, proc) > 0, 30)
    site.net.degrade(loss=0.05, rate="512kbit")
    cut, before = time.monotonic(), ran_by(workers, proc)
    # Round trips of a task row's size, from the host: proof that the fault is in force.
    probe = [*site.net.exec(), sys.executable, "-c", PROBE, site.pg.url(pg_url)]
    out = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=True).stdout
    trips = sorted(float(s) * 1000 for s in out.split())
    assert trips[len(trips) // 2] > 20, trips  # 3 KB at 512 kbit/s take 47 ms
    wait_until(
        lambda: time.monotonic() - cut > LEASE + 1 and ran_by(workers, proc) >= before + 10,
        60,
        0.1,
    )
    site.net.heal()
    return (
        f"5% loss and 512 kbit/s for {time.monotonic() - cut:.1f}s (3 KB round trips: "
        f"median {trips[len(trips) // 2]:.0f} ms, max {trips[-1]:.0f} ms), running "
        f"{ran_by(workers, proc) - before} tasks through it"
    )


FAULTS: dict[str, Callable[[Scene], str]] = {
    "partition": partition_past_its_lease,
    "broker_partition": partition_from_the_broker,
    "replies_lost": replies_lost,
    "loss_and_delay": lossy_and_slow,
}


def woken_alone(pg_url: str, queue: str) -> tuple[set[str], int]:
    """Enqueue tasks one at a time until five in a row start within a quarter of the poll
    interval of their commit, as only wake-ups start them; their ids, and how
    many started later (from a poll) first."""
    ids: set[str] = set()
    fast = slow = 0
    deadline = time.monotonic() + 60
    with psycopg.connect(pg_url) as c:
        while fast < 5:
            assert time.monotonic() < deadline, "wake-ups no longer reach the host"
            with txqueue.transaction(c):
                task_id = str(txqueue.enqueue(c, Task("record", {"sleep": 0}, queue=queue)))
            ids.add(task_id)
            wait_until(lambda: count(pg_url, "state <> 'succeeded'") == 0, 30, 0.02)
            [row] = rows(pg_url, "id = %s", (task_id,))
            if (row["start_time"] - row["created_at"]).total_seconds() < POLL / 4:
                fast += 1
            else:
                fast, slow = 0, slow + 1
    return ids, slow


def broker_queue(amqp_url: str, queue: str) -> tuple[int, int]:
    """The test queue's (ready messages, consumers), as RabbitMQ counts them."""
    with pika.BlockingConnection(pika.URLParameters(amqp_url)) as conn:
        declared = conn.channel().queue_declare(f"txqueue.{queue}", passive=True)
    return int(declared.method.message_count), int(declared.method.consumer_count)


@pytest.mark.parametrize(
    ("fault", "rabbitmq", "pool"),
    [pytest.param(f, True, "threads", marks=RABBITMQ) for f in FAULTS]
    + [pytest.param("partition", True, "processes", marks=RABBITMQ)]
    + [("partition", False, "threads")],
    ids=[*FAULTS, "partition-processes", "partition-notify"],
)
def test_a_worker_host_cut_off_then_healed_keeps_every_promise(
    fault: str,
    rabbitmq: bool,
    pool: str,
    services: tuple[str, str],
    pg_url: str,
    queue: str,
    sites: list[Site],
    workers: Workers,
) -> None:
    """``rabbitmq`` False: woken by NOTIFY, the cut-off host's listener cut off with it.
    ``pool``: the workers'."""
    amqp_url = services[1] if rabbitmq else ""
    workers.pool = pool
    workers.env.update(TXQUEUE_TEST_QUEUE=queue, TXQUEUE_TEST_LEASE=str(LEASE), TXQUEUE_AMQP_URL="")
    procs = [
        workers.start(
            *ARGS,
            "--database-url",
            site.pg.url(pg_url),
            *(("--amqp-url", site.mq.url(amqp_url)) if rabbitmq else ()),
            prefix=site.net.exec(),
        )
        for site in sites
    ]
    victim = procs[0]
    ready = "consuming txqueue." if rabbitmq else "woken by PostgreSQL NOTIFY"
    wait_until(lambda: all(ready in workers.output(p) for p in procs), 60)
    cleaner = txqueue.Cleaner(database_url=pg_url, amqp_url=amqp_url or None, interval=0.5)
    cleaning = threading.Thread(target=cleaner.run, name="cleaner")
    cleaning.start()
    txqueue.configure(amqp_url=amqp_url or None)
    producers = Producers(pg_url, queue, threads=6, transactions=120)
    try:
        producers.start()
        scene = Scene(sites[0], victim, pg_url, amqp_url, queue, workers)
        what = FAULTS[fault](scene)
        healed = time.monotonic()
        producers.join()
        committed = {str(i) for i in producers.committed} | scene.enqueued
        wait_until(lambda: count(pg_url, "state = 'succeeded'") == len(committed), 60, 0.1)
        # Healed, it works on in the same process: alone now, it runs the tasks enqueued
        # from now on, woken again (by RabbitMQ, or its listener's NOTIFY).
        for proc in procs[1:]:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        after, slow = woken_alone(pg_url, queue)
        resumed = time.monotonic() - healed
        committed |= after
    finally:
        for site in sites:
            site.net.heal()
        cleaner.stop()
        cleaning.join(30)
        txqueue.configure()
    assert victim.poll() is None  # never restarted
    assert workers.stop_all() == [0, 0, 0]
    if rabbitmq:
        # Every wake-up was acked, those held up on the cut-off host's channel too: one
        # left unacked would be back on the queue once RabbitMQ has seen the consumers go.
        wait_until(lambda: broker_queue(amqp_url, queue)[1] == 0, 30, 0.1)
        assert broker_queue(amqp_url, queue)[0] == 0

    table = {str(r["id"]): r for r in rows(pg_url)}
    runs = workers.runs()
    # Promise 3: nothing rolled back ran, or is there.
    assert not {t for t, _, _ in runs} & {str(i) for i in producers.rolled_back}
    # Promise 1: every committed task is there, and succeeded.
    assert set(table) == committed
    assert {r["state"] for r in table.values()} == {"succeeded"}
    # Promise 4: no attempt ran twice.
    attempts = [(t, a) for t, a, _ in runs]
    assert len(attempts) == len(set(attempts))
    # Promise 5: a task ran again only because the cut-off host lost its lease, and that
    # host's late outcome was fenced out (logged, and counted in its statistics): the
    # outcome recorded is the last attempt's.
    output = workers.output(victim)
    fenced = set(re.findall(r"task (\S+) attempt (\d+): outcome dropped", output))
    stats = re.search(r"stopped: (\{.*\})", output)
    assert stats is not None and ast.literal_eval(stats[1])["fenced_out"] == len(fenced)
    by_task: dict[str, dict[int, int]] = defaultdict(dict)
    for task_id, attempt, pid in runs:
        by_task[task_id][attempt] = pid
    reruns: set[tuple[str, str]] = set()
    lost = 0
    for task_id, row in table.items():
        ran = by_task[task_id]
        assert ran.get(row["attempts"]) == row["result"]["pid"], (task_id, ran, row["result"])
        errors = {e["attempt"]: e for e in row["errors"]}
        for e in errors.values():
            assert e["type"] == LEASE_EXPIRED and f":{victim.pid}:" in e["worker_id"], e
        lost += len(errors)
        for attempt, pid in ran.items():
            if attempt != row["attempts"]:
                assert pid == victim.pid and attempt in errors, (task_id, ran, row["errors"])
                reruns.add((task_id, str(attempt)))
                if fault == "partition":  # healed only once the others had finished these
                    assert row["result"]["pid"] != victim.pid
    assert reruns == fenced
    if fault == "partition":
        assert lost > 0 and fenced, lost
    if fault == "broker_partition":  # it kept its leases throughout
        assert lost == 0 and len(runs) == len(table)
    summarize(
        f"multi-host{', process pools' if pool == 'processes' else ''}: one host {what}; "
        f"{producers.transactions} business transactions, "
        f"{len(committed)} committed tasks all succeeded, {len(producers.rolled_back)} "
        f"rolled back never ran; {len(runs)} handler runs; that host lost {lost} "
        f"attempts ({len(fenced)} late outcomes fenced out); alone after the heal, it was "
        f"woken by {'RabbitMQ' if rabbitmq else 'NOTIFY'} again within {resumed:.1f}s (after "
        f"{slow} tasks found by its polls)"
    )
