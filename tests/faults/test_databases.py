"""Promises 1, 3 and 5 with one fleet of workers serving three databases, each on a cluster
of the test's own, under load: one cluster killed and restarted, one partitioned away from
the workers (a proxy cut), one failed over to its synchronous standby. Nothing committed is
lost, nothing rolled back runs, nothing runs twice (the lease outlasts every outage), and
the two databases not at fault keep starting their tasks promptly meanwhile."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager

import psycopg
import pytest

import txqueue
from txqueue import App, config
from txqueue.store import POSTGRES

from ..integration.cluster import Server, cluster
from ..integration.helpers import wait_until
from ..partition import RABBITMQ
from .conftest import Workers, summarize
from .proxy_process import ProxyProcess
from .test_failover import SETTINGS, Producers, pair

pytestmark = pytest.mark.xdist_group("faults")

ARGS = ("--concurrency", "4", "--poll-interval", "1", "--shutdown-timeout", "10")
LEASE = 60.0  # longer than any outage here: a task runs again only if its worker dies
OUTAGE = 4.0
# Seconds from commit to start, at most, for the databases not at fault: well under the
# outage, which a database held up by another's would wait out (measured here: under 1 s).
PROMPT = 2.5


def prepared(url: str) -> None:
    with closing(POSTGRES.connect(url)) as c:
        POSTGRES.apply_schema(c)
        c.execute("CREATE TABLE IF NOT EXISTS orders (id uuid PRIMARY KEY, task_id uuid NOT NULL)")


@contextmanager
def three() -> Iterator[tuple[tuple[Server, Server], Server, Server]]:
    """The failover pair (synchronous), the cluster to partition, the cluster to crash."""
    with pair(sync=True) as failing, cluster(**SETTINGS) as cut_off, cluster(**SETTINGS) as crashed:
        prepared(cut_off.url())
        prepared(crashed.url())
        yield failing, cut_off, crashed


@RABBITMQ
def test_a_fleet_of_three_databases_keeps_its_promises_while_each_fails_in_turn(
    services: tuple[str, str],
    queue: str,
    workers: Workers,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with three() as ((primary, replica), cut_off, crashed), ExitStack() as stack:
        proxy = ProxyProcess(cut_off.port)
        stack.callback(proxy.close)
        direct = {
            "failover": f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:"
            f"{replica.port}/postgres?target_session_attrs=read-write",
            "partition": cut_off.url(),
            "crash": crashed.url(),
        }
        served = {**direct, "partition": proxy.url(cut_off.url())}
        App(databases=direct, amqp_url=None).init()
        workers.env.update(
            TXQUEUE_TEST_QUEUE=queue,
            TXQUEUE_TEST_LEASE=str(LEASE),
            TXQUEUE_AMQP_URL=services[1],
            TXQUEUE_DATABASES=" ".join(f"{n}={u}" for n, u in served.items()),
        )
        monkeypatch.setenv(config.DATABASES_ENV, workers.env["TXQUEUE_DATABASES"])
        txqueue.configure(amqp_url=services[1])
        procs = [workers.start(*ARGS) for _ in range(2)]
        producers = {name: Producers(url, queue, threads=2) for name, url in direct.items()}
        try:
            wait_until(lambda: all(workers.output(p).count("on queues") == 3 for p in procs), 60)
            for p in producers.values():
                p.start()
            wait_until(lambda: len(workers.runs()) >= 150, 60, 0.05)
            windows = faults(primary, replica, proxy, crashed)
            time.sleep(3)
        finally:
            for p in producers.values():
                p.join()
        committed = {i for p in producers.values() for i in p.committed}
        wait_until(lambda: committed <= {r[0] for r in workers.runs()}, 120, 0.2)
        left = {name: lost(direct[name], p) for name, p in producers.items()}
        codes = workers.stop_all()
    runs = Counter(task_id for task_id, _, _ in workers.runs())
    rolled_back = {i for p in producers.values() for i in p.rolled_back}
    assert not rolled_back & set(runs), "a rolled-back task ran"
    assert {i: n for i, n in runs.items() if n > 1} == {}, "a task ran twice"
    assert left == {name: set() for name in direct}, "a committed task never ran"
    assert codes == [0, 0]
    for proc in procs:  # each worker said which database it lost, and when it was back
        said = workers.output(proc)
        assert all(f"database {n} reachable again" in said for n in direct), said
    prompt = promptness(producers, workers, windows)
    summarize(
        f"three databases, each failing in turn: {len(committed)} committed, "
        f"{len(rolled_back)} rolled back, commit-to-start p99 of the others during each "
        f"fault {prompt}"
    )
    assert all(p99 <= PROMPT for p99 in prompt.values()), prompt


def faults(
    primary: Server, replica: Server, proxy: ProxyProcess, crashed: Server
) -> dict[str, tuple[float, float]]:
    """Each database's fault in turn, under load: when each began and ended (Unix time)."""
    windows = {}
    began = time.time()
    crashed.kill()
    time.sleep(OUTAGE)
    crashed.start(SETTINGS)
    windows["crash"] = (began, time.time() + 2)
    time.sleep(3)
    began = time.time()
    proxy.cut()
    time.sleep(OUTAGE)
    proxy.restore()
    windows["partition"] = (began, time.time() + 2)
    time.sleep(3)
    began = time.time()
    primary.kill()
    replica.promote()
    windows["failover"] = (began, time.time() + 2)
    return windows


def lost(url: str, producers: Producers) -> set[str]:
    """Tasks whose COMMIT returned that the database does not have finished."""
    with closing(psycopg.connect(url)) as c:
        done = {
            str(r[0]) for r in c.execute("SELECT id FROM txqueue_tasks WHERE state = 'succeeded'")
        }
    return set(producers.committed) - done


def promptness(
    producers: dict[str, Producers], workers: Workers, windows: dict[str, tuple[float, float]]
) -> dict[str, float]:
    """For each fault, the p99 seconds from commit to start of the tasks the other databases
    committed while it lasted."""
    started = {task_id: at for task_id, attempt, _, at in workers.starts() if attempt == 1}
    out = {}
    for fault, (began, ended) in windows.items():
        waits = sorted(
            started[i] - at
            for name, p in producers.items()
            if name != fault
            for i, at in p.committed.items()
            if began <= at <= ended
        )
        assert waits, f"nothing committed by the others during the {fault}"
        out[fault] = round(waits[min(len(waits) - 1, int(0.99 * len(waits)))], 3)
    return out
