"""The command line with several named databases (TXQUEUE_DATABASES, or --database): init
names each, one worker process serves them all, status, the cleaner and the gauges say
each database's own, and a command of one database takes its name."""

from __future__ import annotations

import json
import os
import signal
import time
from contextlib import closing
from pathlib import Path

import psycopg

import txqueue
from tests.partition import RABBITMQ
from txqueue import App, Task

from .helpers import running, wait_until
from .test_cli import app_workers, cli, one_line_error
from .test_dashboard import fail
from .test_databases import recording
from .test_leader import INTERVAL, Loop, holder


def enqueue_one_each(databases: dict[str, str], queue: str) -> None:
    with App(databases=databases, amqp_url=None) as app:
        for name, url in databases.items():
            with closing(psycopg.connect(url)) as c, txqueue.transaction(c):
                app.enqueue(c, Task("record", {"from": name}, queue=queue))


def test_one_worker_process_serves_every_named_database(
    shards: dict[str, str], queue: str, tmp_path: Path
) -> None:
    env = {
        "TXQUEUE_DATABASES": " ".join(f"{n}={u}" for n, u in shards.items()),
        "TXQUEUE_TEST_QUEUE": queue,
        "TXQUEUE_TEST_RECORD_DIR": str(tmp_path),
    }
    init = cli("init", env=env)
    assert init.returncode == 0, init.stderr
    assert init.stdout.splitlines() == [f"{n}: schema already up to date" for n in shards]
    enqueue_one_each(shards, queue)
    ran = cli("worker", "--app", "tests.integration.apps:registry", "--burst", env=env)
    assert ran.returncode == 0, ran.stderr
    assert len(list(tmp_path.glob("*.log"))) == 1  # one process
    assert len((tmp_path / next(tmp_path.glob("*.log")).name).read_text().splitlines()) == 3
    status = cli("status", "--json", env=env)
    assert status.returncode == 0, status.stderr
    by_database = json.loads(status.stdout)["databases"]
    assert sorted(by_database) == sorted(shards)
    for doc in by_database.values():
        [entry] = doc["queues"]
        assert entry["queue"] == queue and entry["succeeded"] == 1
    one = cli("status", "--json", "--database-url", "us", env=env)
    assert json.loads(one.stdout)["queues"][0]["succeeded"] == 1
    cleaned = cli("cleaner", "--once", env=env)
    assert cleaned.returncode == 0, cleaned.stderr
    assert [line.split(":")[0] for line in cleaned.stdout.splitlines()] == list(shards)
    gauges = cli("metrics", env=env).stdout
    for name in shards:
        assert f'database="{name}"' in gauges and f'queue="{queue}"' in gauges


def test_a_database_out_of_reach_is_said_and_the_others_are_served(
    shards: dict[str, str], queue: str
) -> None:
    given = [f"--database={n}={u}" for n, u in shards.items()]
    gone = "--database=gone=postgresql://postgres:s3cret@127.0.0.1:1/x?connect_timeout=2"
    assert cli("init", *given).returncode == 0
    status = cli("status", "--json", *given, gone)
    assert status.returncode == 1
    docs = json.loads(status.stdout)["databases"]
    assert "error" in docs["gone"] and all("queues" in docs[n] for n in shards)
    assert "gone: " in status.stderr and "s3cret" not in status.stderr + status.stdout
    gauges = cli("metrics", *given, gone)
    assert gauges.returncode == 0, gauges.stderr
    assert all(f'database="{n}"' in gauges.stdout for n in shards)
    assert 'database="gone"' not in gauges.stdout and "s3cret" not in gauges.stderr
    cleaned = cli("cleaner", "--once", *given, gone)
    assert cleaned.returncode == 1 and "Traceback" not in cleaned.stderr
    assert sorted(line.split(":")[0] for line in cleaned.stdout.splitlines()) == sorted(shards)


def test_a_command_of_one_database_asks_which_of_several(shards: dict[str, str]) -> None:
    env = {"TXQUEUE_DATABASES": " ".join(f"{n}={u}" for n, u in shards.items())}
    one_line_error(
        cli("queue", "show", env=env), "TXQUEUE_DATABASES names several", "--database-url"
    )
    one_line_error(cli("queue", "show", "--database-url", "mars", env=env), "'mars' is not one of")
    assert cli("queue", "show", "--database-url", "eu", env=env).returncode == 0
    one_line_error(
        cli("init", "--database", "eu", env={}), "--database 'eu': not NAME=URL, nor a name"
    )
    secret = "postgresql://bob:s3cret@127.0.0.1:1/x?sslmode=disable"
    for given in (f"--database={secret}", f"--database=eu={secret}&password=s3cret2"):
        said = one_line_error(cli("status", given, env={}))
        assert "s3cret" not in said, said
    other = "postgresql://postgres@127.0.0.1:5432/elsewhere"
    one_line_error(cli("status", "--database-url", other, env=env), "--database-url: not one of")


def test_the_read_and_bulk_commands_show_and_act_on_each_database(
    shards: dict[str, str], queue: str
) -> None:
    """A failed task in each database: list, find, history and dead-letters show each one's
    under its name; bulk retry retries each."""
    env = {"TXQUEUE_DATABASES": " ".join(f"{n}={u}" for n, u in shards.items())}
    assert cli("init", env=env).returncode == 0
    registry = txqueue.Registry()

    @registry.task("boom", queue=queue, max_attempts=1)
    def boom() -> None:
        raise ValueError("no")

    with App(registry, databases=shards, amqp_url=None) as app:
        for url in shards.values():
            with closing(psycopg.connect(url)) as c, txqueue.transaction(c):
                app.enqueue(c, Task("boom", queue=queue))
        app.fleet().run(burst=True)
    for command in (["list"], ["find", "--state", "failed"], ["history"], ["dead-letters"]):
        done = cli(*command, "--json", env=env)
        assert done.returncode == 0, done.stderr
        by_database = json.loads(done.stdout)["databases"]
        assert sorted(by_database) == sorted(shards), command
        for doc in by_database.values():
            [items] = [v for v in doc.values() if isinstance(v, list)]
            assert items, command
    text = cli("find", "--state", "failed", env=env).stdout
    assert all(f"database {n}" in text for n in shards)
    retried = cli("bulk", "retry", "--state", "failed", "--json", env=env)
    assert retried.returncode == 0, retried.stderr
    changed = {n: d["changed"] for n, d in json.loads(retried.stdout)["databases"].items()}
    assert changed == dict.fromkeys(shards, 1)
    for url in shards.values():
        with closing(psycopg.connect(url)) as c:
            assert c.execute("SELECT state FROM txqueue_tasks").fetchall() == [("pending",)]


def test_a_cleaner_loop_given_another_databases_url_stops_in_one_line(
    shards: dict[str, str],
) -> None:
    given = [f"--database={n}={u}" for n, u in shards.items()]
    assert cli("init", *given).returncode == 0
    swapped = cli("cleaner", "--loop", "--interval", "0.5", f"--database=us={shards['eu']}")
    one_line_error(swapped, "'us' is named 'eu'")


def test_of_two_cleaner_loops_one_leads_each_database_and_the_other_takes_over_all(
    shards: dict[str, str],
) -> None:
    """Each database's lease is held by one loop of two; the other takes over the killed
    one's databases within an interval, and then cleans every database."""
    env = {"TXQUEUE_DATABASES": " ".join(f"{n}={u}" for n, u in shards.items())}
    assert cli("init", env=env).returncode == 0
    loops = {loop.proc.pid: loop for loop in (Loop(None, **env), Loop(None, **env))}
    try:
        wait_until(lambda: all(holder(u) in loops for u in shards.values()), timeout=30)
        victim = loops[holder(shards["eu"]) or 0]
        [survivor] = [loop for loop in loops.values() if loop is not victim]
        victim.proc.kill()
        killed = time.monotonic()
        alone = survivor.proc.pid
        wait_until(lambda: all(holder(u) == alone for u in shards.values()), 10, every=0.02)
        assert time.monotonic() - killed < INTERVAL + 1.0
        seen = len(survivor.lines)  # then it cleans each database, each said by name
        wait_until(
            lambda: all(
                f"of database {n}: re-notified" in "".join(survivor.lines[seen:]) for n in shards
            ),
            10,
        )
    finally:
        for loop in loops.values():
            if loop.proc.poll() is None:
                loop.proc.send_signal(signal.SIGTERM)
        said = {pid: loop.finish() for pid, loop in loops.items()}
    assert survivor.proc.returncode == 0, said[alone]
    assert "Traceback" not in said[alone], said[alone]


def test_a_fleet_process_stopped_by_sigterm_finishes_its_running_task(
    shards: dict[str, str], queue: str, tmp_path: Path
) -> None:
    """SIGTERM stops every database's worker; the task one of them runs finishes first and
    is recorded, and the process exits 0."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")},
        "TXQUEUE_DATABASES": " ".join(f"{n}={u}" for n, u in shards.items()),
        "TXQUEUE_TEST_QUEUE": queue,
        "TXQUEUE_TEST_RECORD_DIR": str(tmp_path),
    }
    assert cli("init", env=env).returncode == 0
    with (
        App(databases=shards, amqp_url=None) as app,
        closing(psycopg.connect(shards["us"])) as c,
        txqueue.transaction(c),
    ):
        app.enqueue(c, Task("sleep", {"seconds": 2}, queue=queue))
    [worker] = app_workers(1, env)
    try:
        wait_until(lambda: (tmp_path / "sleep.started").exists(), timeout=30)
        worker.send_signal(signal.SIGTERM)
        _, output = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, output
    assert "SIGTERM" in output and "Traceback" not in output, output
    with closing(psycopg.connect(shards["us"])) as c:
        assert c.execute("SELECT state FROM txqueue_tasks").fetchall() == [("succeeded",)]


@RABBITMQ
def test_bulk_retry_of_databases_given_by_flag_wakes_each_databases_fleet(
    shards: dict[str, str], services: tuple[str, str], routed_queues: str
) -> None:
    """Without TXQUEUE_DATABASES, ``--database NAME=URL`` routes the retried tasks'
    wake-ups by name too: a fleet polling a minute apart starts them at once."""
    queue = routed_queues
    registry, ran = recording(queue)
    with App(registry, databases=shards, amqp_url=services[1]) as app:
        app.init()
        fleet = app.fleet(poll_interval=60)
    for name, url in shards.items():
        with closing(psycopg.connect(url, autocommit=True)) as c:
            fail(url, txqueue.enqueue(c, Task("rec", name, queue=queue)))
    given = [f"--database={n}={u}" for n, u in shards.items()]
    with running(fleet):
        retried = cli("bulk", "retry", "--state", "failed", "--amqp-url", services[1], *given)
        assert retried.returncode == 0, retried.stderr
        wait_until(lambda: sorted(ran) == sorted(shards), timeout=30)
