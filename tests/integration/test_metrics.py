"""Prometheus metrics and /healthz, scraped from real workers and the cleaner's loop."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
from contextlib import closing
from pathlib import Path

import pytest
import yaml

import txqueue
from txqueue import Task
from txqueue.errors import ConfigError

from .helpers import connect, count, free_port, http_get, running, samples, value, wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_a_running_worker_counts_outcomes_times_handlers_and_reports_its_state(
    db_url: str, amqp_url: str, queue: str
) -> None:
    registry = txqueue.Registry()
    flaky: set[int] = set()

    @registry.task("ok", queue=queue)
    def ok(payload: int) -> None:
        time.sleep(0.02)

    @registry.task("flaky", queue=queue, max_attempts=3, backoff=0.05)
    def flaky_once(payload: int) -> None:
        if payload not in flaky:
            flaky.add(payload)
            raise RuntimeError("first attempt fails")

    @registry.task("doomed", queue=queue, max_attempts=1)
    def doomed(payload: int) -> None:
        raise RuntimeError("always fails")

    worker = txqueue.Worker(
        registry,
        database_url=db_url,
        amqp_url=amqp_url,
        concurrency=3,
        metrics_port=0,
        metrics_host="127.0.0.1",
    )
    with running(worker):
        assert worker.wait_consuming()
        with closing(connect(db_url)) as c, txqueue.transaction(c):
            txqueue.enqueue_many(
                c,
                [Task("ok", i, queue=queue) for i in range(4)]
                + [Task("flaky", 1, queue=queue), Task("doomed", 1, queue=queue)],
            )
        wait_until(lambda: count(db_url, "state IN ('succeeded', 'failed')") == 6, timeout=10)
        wait_until(lambda: worker.stats["succeeded"] + worker.stats["failed"] == 6)
        status, text = http_get(worker.metrics_port, "/metrics")
        assert status == 200
        health = http_get(worker.metrics_port, "/healthz")
    scrape = samples(text)
    finished = "txqueue_tasks_finished_total"
    assert value(scrape, finished, queue=queue, name="ok", outcome="succeeded") == 4
    assert value(scrape, finished, queue=queue, name="flaky", outcome="retried") == 1
    assert value(scrape, finished, queue=queue, name="flaky", outcome="succeeded") == 1
    assert value(scrape, finished, queue=queue, name="doomed", outcome="failed") == 1
    runs = "txqueue_task_duration_seconds_count"
    assert value(scrape, runs, queue=queue, name="ok") == 4
    assert value(scrape, runs, queue=queue, name="flaky") == 2
    # Each 20 ms handler counts past the 10 ms bucket's edge, and within the 50 ms one.
    bucket = "txqueue_task_duration_seconds_bucket"
    assert value(scrape, bucket, queue=queue, name="ok", le="0.01") == 0
    assert value(scrape, bucket, queue=queue, name="ok", le="0.25") == 4
    assert value(scrape, "txqueue_task_start_delay_seconds_count", queue=queue) == 7
    # The retry waited its backoff: its start came 50 ms or more after its first attempt.
    assert value(scrape, "txqueue_task_start_delay_seconds_sum", queue=queue) < 7 * 1.0
    assert value(scrape, "txqueue_worker_threads") == 3
    assert (("txqueue_tasks_running", frozenset({("queue", queue)})), 0) in scrape.items()
    assert value(scrape, "txqueue_database_up") == 1
    assert value(scrape, "txqueue_database_outages_total") == 0
    assert value(scrape, "txqueue_broker_up") == 1
    # One message for the batch's six: claimed by it (or first by a poll under way), or,
    # beyond the three threads, passed on to the poll.
    ends = ("claimed", "not_pending", "passed_on")
    assert sum(value(scrape, "txqueue_wakeups_total", result=r) for r in ends) == 6
    assert health == (200, "ok\n")
    # Stopped, the worker no longer serves.
    with pytest.raises(urllib.error.URLError):
        http_get(worker.metrics_port, "/healthz")


def test_health_says_why_once_a_part_has_died(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    registry.task("noop", queue=queue)(lambda payload: None)
    worker = txqueue.Worker(
        registry, database_url=db_url, amqp_url=None, metrics_port=0, metrics_host="127.0.0.1"
    )
    assert worker.unhealthy() == "not running"
    with running(worker):
        wait_until(lambda: worker.metrics_port != 0 and worker.unhealthy() is None)
        assert http_get(worker.metrics_port, "/healthz") == (200, "ok\n")
        assert http_get(worker.metrics_port, "/other")[0] == 404
        # A name no part of this worker runs under: a real part's thread, started late on
        # a loaded machine, would take its own name off the set as it starts.
        supervisor = worker._supervisor
        assert supervisor is not None
        with supervisor._lock:
            supervisor._restarting.add("txqueue-lost")
        assert http_get(worker.metrics_port, "/healthz") == (503, "not running: txqueue-lost\n")
        with supervisor._lock:
            supervisor._restarting.clear()


def test_a_taken_port_and_a_bad_one_are_clear_errors(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    registry.task("noop", queue=queue)(lambda payload: None)
    with pytest.raises(ConfigError, match="metrics_port must be 0 to 65535"):
        txqueue.Worker(registry, database_url=db_url, amqp_url=None, metrics_port=70000)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = txqueue.Worker(
            registry,
            database_url=db_url,
            amqp_url=None,
            metrics_port=port,
            metrics_host="127.0.0.1",
        )
        with pytest.raises(ConfigError, match=f"metrics port 127.0.0.1:{port}"):
            worker.run(burst=True)


def test_without_the_extra_metrics_fail_in_one_line_naming_it(
    db_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.delitem(sys.modules, "txqueue.observability.metrics", raising=False)
    monkeypatch.delattr("txqueue.observability.metrics", raising=False)
    registry = txqueue.Registry()
    registry.task("noop", queue=queue)(lambda payload: None)
    with pytest.raises(ConfigError, match=r"pip install 'txqueue\[metrics\]'"):
        txqueue.Worker(registry, database_url=db_url, amqp_url=None, metrics_port=0)


def test_queue_gauges_from_txqueue_metrics_and_the_cleaners_loop(db_url: str, queue: str) -> None:
    flow = txqueue.Workflow()
    flow.add(Task("b", queue=queue), after=[flow.add(Task("b", queue=queue))])
    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue_many(c, [Task("a", i, queue=queue) for i in range(3)])
        txqueue.enqueue(c, Task("a", queue=queue, delay=3600))
        txqueue.enqueue_workflow(c, flow)
        txqueue.cancel_workflow(c, flow.id)
    env = {"TXQUEUE_DATABASE_URL": db_url, "PATH": "/usr/bin:/bin"}
    once = subprocess.run(
        [sys.executable, "-m", "txqueue", "metrics"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert once.returncode == 0, once.stderr
    scrape = samples(once.stdout)
    assert value(scrape, "txqueue_queue_tasks", queue=queue, state="pending") == 4
    assert 0 < value(scrape, "txqueue_queue_oldest_ripe_age_seconds", queue=queue) < 60
    assert value(scrape, "txqueue_workflows", state="cancelled") == 1
    assert value(scrape, "txqueue_workflows", state="running") == 0
    port = free_port()
    cleaner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "txqueue",
            "cleaner",
            "--loop",
            "--interval",
            "0.5",
            "--metrics-port",
            str(port),
            "--metrics-host",
            "127.0.0.1",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def serving() -> bool:
            try:
                return http_get(port, "/healthz") == (200, "ok\n")
            except urllib.error.URLError:
                return False

        wait_until(serving, timeout=15)
        status, text = http_get(port, "/metrics")
    finally:
        cleaner.terminate()
        cleaner.wait(10)
    assert status == 200
    assert value(samples(text), "txqueue_queue_tasks", queue=queue, state="pending") == 4


def test_the_keda_query_counts_the_ripe_backlog(pg_url: str, queue: str) -> None:
    query = yaml.safe_load((ROOT / "workers/keda.yaml").read_text())["spec"]["triggers"][0]
    with closing(connect(pg_url, autocommit=True)) as c:
        txqueue.enqueue_many(c, [Task("a", i, queue=queue) for i in range(5)])
        txqueue.enqueue(c, Task("a", queue=queue, delay=3600))  # not ripe: not counted
        assert c.execute(query["metadata"]["query"]).fetchone() == (5,)
