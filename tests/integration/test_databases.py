"""One fleet of workers serving several named PostgreSQL databases: each task enqueued in
its own database's transaction, woken through that database's queues (RabbitMQ's, or its
NOTIFY), run by the fleet, with no wake-up crossing to another database; a backlog or an
outage in one holding up none of the others."""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import closing
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

import txqueue
from tests.partition import RABBITMQ
from txqueue import App, Task, config
from txqueue.errors import ConfigError

from ..faults.proxy import Proxy
from .conftest import NAMES
from .helpers import http_get, running, samples, wait_until
from .test_cli import listeners

ASTRAY = ("dropped_gone", "dropped_rolled_back", "dropped_not_pending", "gave_up")


def recording(queue: str, seconds: float = 0.0) -> tuple[txqueue.Registry, list[Any]]:
    registry = txqueue.Registry()
    ran: list[Any] = []

    @registry.task("rec", queue=queue)
    def rec(payload: Any) -> None:
        time.sleep(seconds)
        ran.append(payload)

    return registry, ran


def enqueue_in(app: App, url: str, queue: str, payloads: list[Any]) -> None:
    """One transaction per task, on a connection to ``url``'s database."""
    with closing(psycopg.connect(url)) as c:
        for payload in payloads:
            with txqueue.transaction(c):
                app.enqueue(c, Task("rec", payload, queue=queue))


def name_of(url: str) -> str | None:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT name FROM txqueue_database").fetchone()
    return None if row is None else str(row[0])


def astray(fleet: txqueue.Fleet) -> dict[str, int]:
    return {k: v for k, v in fleet.stats.items() if k in ASTRAY and v}


@RABBITMQ
def test_a_fleet_runs_each_databases_tasks_woken_through_its_own_queues(
    shards: dict[str, str], services: tuple[str, str], routed_queues: str
) -> None:
    """A task enqueued in each database, one transaction each, is started by its wake-up
    (polls a minute apart), by the worker of that database only."""
    queue = routed_queues
    registry, ran = recording(queue)
    with App(registry, databases=shards, amqp_url=services[1]) as app:
        app.init()
        assert {n: name_of(u) for n, u in shards.items()} == {n: n for n in NAMES}
        fleet = app.fleet(poll_interval=60)
        with running(fleet):
            caught_up(app, shards, queue, ran)
            for name, url in shards.items():
                enqueue_in(app, url, queue, [f"{name}0", f"{name}1"])
            wait_until(lambda: len(ran) == 9, timeout=30)
            assert app.flush(5)
    assert sorted(ran[3:]) == sorted(f"{n}{i}" for n in NAMES for i in (0, 1))
    assert fleet.stats["woken"] >= 6 and fleet.stats["succeeded"] == 9
    assert astray(fleet) == {}
    assert all(w.stats["succeeded"] == 3 for w in fleet.workers.values())


def caught_up(app: App, shards: dict[str, str], queue: str, ran: list[Any]) -> None:
    """Once each worker listens for NOTIFY, and has polled for what committed before it
    did: that poll would claim a task enqueued meanwhile before its wake-up came. A first
    task in each database, run, sees it past."""
    wait_until(lambda: all(listeners(url) for url in shards.values()), timeout=30)
    before = len(ran)
    for url in shards.values():
        enqueue_in(app, url, queue, ["first"])
    wait_until(lambda: len(ran) == before + len(shards), timeout=30)


def test_without_a_broker_each_database_wakes_its_own_worker_by_notify(
    shards: dict[str, str], queue: str
) -> None:
    registry, ran = recording(queue)
    with App(registry, databases=shards, amqp_url=None) as app:
        app.init()
        fleet = app.fleet(poll_interval=60)
        with running(fleet):
            time.sleep(0.5)  # the listeners listen
            for name, url in shards.items():
                enqueue_in(app, url, queue, [name])
            wait_until(lambda: len(ran) == 3, timeout=30)
    assert sorted(ran) == sorted(NAMES)
    assert fleet.stats["woken"] == 3 and astray(fleet) == {}


@RABBITMQ
def test_a_backlog_in_one_database_holds_up_none_of_the_others(
    shards: dict[str, str], services: tuple[str, str], routed_queues: str
) -> None:
    """Two threads per database: 200 slow tasks in ``eu`` do not delay ``us``'s task."""
    queue = routed_queues
    registry, ran = recording(queue, seconds=0.05)
    with App(registry, databases=shards, amqp_url=services[1]) as app:
        app.init()
        with closing(psycopg.connect(shards["eu"])) as c:
            app.enqueue_many(c, [Task("rec", f"eu{i}", queue=queue) for i in range(200)])
            c.commit()
        fleet = app.fleet(concurrency=2, poll_interval=60)
        with running(fleet):
            wait_until(lambda: len(ran) >= 4, timeout=30)
            began = time.monotonic()
            enqueue_in(app, shards["us"], queue, ["us"])
            wait_until(lambda: "us" in ran, timeout=5)
            took = time.monotonic() - began
            behind = sum(1 for p in ran if p.startswith("eu"))
    assert took < 2.0, f"us's task waited {took:.2f}s behind eu's backlog"
    assert behind < 150  # eu's backlog was still running


def test_a_database_out_of_reach_stops_none_of_the_others(
    shards: dict[str, str], queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A database nothing answers at: the others' tasks run, its worker says it is out of
    reach, the fleet stays healthy (its /healthz too; /metrics says which database is
    down) and stops promptly."""
    registry, ran = recording(queue)
    up = {"eu": shards["eu"], "us": shards["us"]}
    with App(registry, databases=up, amqp_url=None) as app:
        app.init()
    down = {**up, "gone": "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=1"}
    fleet = txqueue.Fleet(
        registry, down, amqp_url=None, poll_interval=0.2, metrics_port=0, metrics_host="127.0.0.1"
    )
    caplog.set_level(logging.WARNING, logger="txqueue")
    with running(fleet):
        for name in up:
            with App(registry, databases=up, amqp_url=None) as app:
                enqueue_in(app, up[name], queue, [name])
        wait_until(lambda: len(ran) == 2, timeout=10)
        wait_until(lambda: not fleet.state()["gone"].database_up, timeout=10)
        assert fleet.state()["eu"].database_up and fleet.state()["us"].database_up
        assert fleet.unhealthy() is None
        assert http_get(fleet.metrics_port or 0, "/healthz")[0] == 200
        found = samples(http_get(fleet.metrics_port or 0, "/metrics")[1])
        up_by_database = {
            dict(labels)["database"]: value
            for (metric, labels), value in found.items()
            if metric == "txqueue_database_up"
        }
        assert up_by_database == {"eu": 1.0, "us": 1.0, "gone": 0.0}
        stopping = time.monotonic()
        fleet.stop()
    assert time.monotonic() - stopping < 10
    assert sorted(ran) == ["eu", "us"]
    assert any("127.0.0.1:1" in r.getMessage() for r in caplog.records)


def test_a_worker_refuses_a_database_not_bearing_its_name(
    shards: dict[str, str], queue: str
) -> None:
    registry, _ = recording(queue)
    with App(registry, databases={"eu": shards["eu"]}, amqp_url=None) as app:
        app.init()
    with pytest.raises(ConfigError, match="'us' is not named"):
        txqueue.Fleet(registry, {"us": shards["us"]}, amqp_url=None).run(burst=True)
    with pytest.raises(ConfigError, match="'us' is named 'eu'"):
        txqueue.Fleet(registry, {"us": shards["eu"]}, amqp_url=None).run(burst=True)
    with pytest.raises(ConfigError, match="'us' is named 'eu'"):
        App(registry, databases={"us": shards["eu"]}, amqp_url=None).init()
    assert name_of(shards["eu"]) == "eu"


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"EU": "postgresql://h/a"}, "name 'EU' must be"),
        ({"eu": "sqlite:///a.db"}, "'eu' needs a postgresql:// URL"),
        ({"a": "postgresql://h/x", "b": "postgresql://h/x"}, "'b' and 'a' have the same URL"),
        ({"eu": "postgresql://u:secret@h:port/a"}, r"'eu': malformed database URL .*\*\*\*"),
    ],
)
def test_named_databases_are_checked_where_they_are_given(
    given: dict[str, str], error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry, _ = recording("q")
    for make in (
        lambda: config.databases(given),
        lambda: App(registry, databases=given),
        lambda: txqueue.Fleet(registry, given),
    ):
        with pytest.raises(ConfigError, match=error) as caught:
            make()
        assert "secret" not in str(caught.value)
    monkeypatch.setenv(config.DATABASES_ENV, " ".join(f"{n}={u}" for n, u in given.items()))
    with pytest.raises(ConfigError, match=error):
        App(registry)


def test_an_app_of_several_databases_asks_which_one_where_it_must(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry, _ = recording("q")
    named = {"eu": "postgresql://h/eu", "us": "postgresql://h/us"}
    monkeypatch.setenv(config.DATABASES_ENV, " ".join(f"{n}={u}" for n, u in named.items()))
    app = App(registry, amqp_url=None)
    assert app.databases == named and "eu" in repr(app)
    with pytest.raises(ConfigError, match="name one of eu, us"):
        app.worker()
    with pytest.raises(ConfigError, match="'ap' is not one of eu, us"):
        app.cleaner(database="ap")
    assert app.worker(database="us").database == "us"
    with pytest.raises(ConfigError, match="name one of"):
        _ = app.database_url
    with pytest.raises(ConfigError, match="name one of"):
        app.wait(uuid.uuid4())
    with pytest.raises(ConfigError, match="database_url: of several databases"):
        app.retry_tasks(txqueue.TaskFilter(state="failed"))
    with pytest.raises(ConfigError, match="not both"):
        App(registry, database_url="postgresql://h/eu", databases=named)
    with pytest.raises(ConfigError, match="listen_url"):
        txqueue.Fleet(registry, named, listen_url="postgresql://h/direct")
    with pytest.raises(ConfigError, match="one database"):
        App(registry, database_url="postgresql://h/eu", amqp_url=None).fleet()


def test_a_worker_given_a_named_databases_url_takes_its_name_or_is_refused(
    shards: dict[str, str], queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry, _ = recording(queue)
    with App(registry, databases={"eu": shards["eu"]}, amqp_url=None) as app:
        app.init()
    with pytest.raises(ConfigError, match="it is named 'eu'"):
        txqueue.Worker(registry, database_url=shards["eu"], amqp_url=None).run(burst=True)
    monkeypatch.setenv(config.DATABASES_ENV, f"eu={shards['eu']}")
    worker = txqueue.Worker(registry, database_url=shards["eu"], amqp_url=None)
    assert worker.database == "eu"
    worker.run(burst=True)


def test_a_database_of_another_name_reached_after_the_start_stops_the_worker(
    shards: dict[str, str], queue: str
) -> None:
    """Out of reach at the start, the name is checked on the first connection."""
    registry, _ = recording(queue)
    with App(registry, databases={"eu": shards["eu"]}, amqp_url=None) as app:
        app.init()
    proxy = Proxy(urlsplit(shards["eu"]).port or 5432)
    try:
        proxy.cut()
        worker = txqueue.Worker(
            registry, database_url=proxy.url(shards["eu"]), database="us", amqp_url=None
        )
        refused = pytest.raises(txqueue.SchemaError, match="'us' is named 'eu'")
        with refused, running(worker):
            time.sleep(0.5)
            proxy.restore()
            wait_until(lambda: worker.unhealthy() == "not running", timeout=15)
    finally:
        proxy.close()


def test_an_apps_bulk_calls_take_a_databases_name(shards: dict[str, str], queue: str) -> None:
    registry = txqueue.Registry()
    registry.task("boom", queue=queue, max_attempts=1)(lambda: 1 / 0)
    with App(registry, databases=shards, amqp_url=None) as app:
        app.init()
        with closing(psycopg.connect(shards["us"])) as c, txqueue.transaction(c):
            app.enqueue(c, Task("boom", queue=queue))
        app.worker(database="us").run(burst=True)
        assert app.retry_tasks(txqueue.TaskFilter(state="failed"), database_url="us") == 1
        assert app.retry_tasks(txqueue.TaskFilter(state="failed"), database_url="eu") == 0
