"""The examples (examples/, workers/tasks.py): end to end against the real services, and
their tasks run inline with txqueue.testing, as a user's own tests would."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import httpx
import pytest

import txqueue
from examples.fastapi_app import tasks as fastapi_tasks
from txqueue import broker
from txqueue.testing import captured, run_tasks
from workers import tasks as worker_tasks

from .helpers import connect, count, drop_schema, execute, free_port, rows, wait_until

ROOT = Path(__file__).resolve().parents[2]
ORDERS = (ROOT / "examples" / "fastapi_app" / "schema.sql").read_text()


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.TransportError:
        return False
    return True


def test_fastapi_enqueues_in_the_request_transaction_and_its_worker_runs_the_task(
    pg_url: str, amqp_url: str, tmp_path: Path
) -> None:
    drop_schema(pg_url)  # the service creates txqueue's tables at start-up
    execute(pg_url, ORDERS)
    base = f"http://127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")}
    # The application's own URL, driver included: txqueue takes it as it is.
    env.update(
        DATABASE_URL=pg_url.replace("postgresql://", "postgresql+asyncpg://", 1),
        TXQUEUE_AMQP_URL=amqp_url,
    )
    log = tmp_path / "uvicorn.out"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "examples.fastapi_app.app:app",
                "--host",
                "127.0.0.1",
                "--port",
                base.rsplit(":", 1)[1],
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: _answers(base), timeout=30, every=0.1)
        with captured(pg_url) as enqueued, httpx.Client(base_url=base, timeout=10) as http:
            order = http.post("/orders", params={"total": 42}).json()["id"]
            wait_until(lambda: http.get(f"/orders/{order}").json()["receipt_sent"], timeout=15)
            refused = http.post("/orders", params={"total": 7, "fail_after_enqueue": True})
        assert refused.status_code == 409
        # One task, the committed order's: the refused order's rolled back with it.
        enqueued.assert_enqueued(fastapi_tasks.send_receipt, order=order)
        assert len(enqueued) == 1
        # Atomic: the receipt's mark and the task's success are one commit.
        [task] = rows(pg_url)
        assert task["state"] == "succeeded"
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        broker.delete_queue(amqp_url, "example_receipts")
    output = log.read_text()
    # uvicorn shuts down gracefully, then exits by the signal it was given.
    assert server.returncode in (0, -signal.SIGTERM) and "Traceback" not in output, output
    assert "Application shutdown complete" in output, output


def test_fastapi_receipt_task_runs_inline_in_its_own_transaction(pg_url: str) -> None:
    execute(pg_url, ORDERS)
    with closing(connect(pg_url)) as c, txqueue.transaction(c):
        [order] = c.execute("INSERT INTO orders (total) VALUES (42) RETURNING id").fetchone()
        fastapi_tasks.send_receipt.enqueue(c, order=order)
    [ran] = run_tasks(fastapi_tasks.registry, pg_url)
    assert (ran.name, ran.state) == ("send_receipt", "succeeded")
    with closing(connect(pg_url)) as c:
        assert c.execute("SELECT receipt_sent FROM orders").fetchall() == [(True,)]


def test_the_workers_example_task_runs_as_the_readme_enqueues_it(
    txqueue_sqlite: str, caplog: pytest.LogCaptureFixture
) -> None:
    send_receipt = worker_tasks.send_receipt
    with closing(connect(txqueue_sqlite)) as c, txqueue.transaction(c):
        typed = send_receipt.enqueue(c, order=7)
        # What the README's `txqueue enqueue send_receipt --payload '{"order": 42}'
        # --queue example_emails` inserts.
        txqueue.enqueue(c, txqueue.Task("send_receipt", {"order": 42}, queue="example_emails"))
    with caplog.at_level(logging.INFO, "workers.tasks"):
        ran = run_tasks(worker_tasks.registry, txqueue_sqlite)
    assert [(r.state, r.result) for r in ran] == [
        ("succeeded", {"sent_to": "customer-of-order-7@example.com"}),
        ("succeeded", {"sent_to": "customer-of-order-42@example.com"}),
    ]
    assert "receipt for order 42 sent (attempt 1)" in caplog.text
    receipt = send_receipt.wait(txqueue_sqlite, typed, timeout=1)
    assert receipt == worker_tasks.Receipt(sent_to="customer-of-order-7@example.com")


def _manage(db_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT / "examples" / "django_project",
        env=_django_env(db_url, env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _django_env(db_url: str, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TXQUEUE_", "DJANGO_"))}
    return {**env, "DATABASE_URL": db_url, **extra}


def test_django_migrates_enqueues_in_atomic_and_runs_handlers_on_the_orm(db_url: str) -> None:
    drop_schema(db_url)
    migrated = _manage(db_url, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    init = _manage(db_url, "txqueue", "init")  # the same schema version, seen from the CLI
    assert init.returncode == 0 and "already up to date" in init.stdout, init.stdout + init.stderr
    # txqueue's models (for the admin) are recorded by its migrations: nothing left to make.
    checked = _manage(db_url, "makemigrations", "--check", "--dry-run")
    assert checked.returncode == 0, checked.stdout + checked.stderr

    with captured(db_url) as enqueued:
        placed = _manage(db_url, "place_order", "42")
    assert placed.returncode == 0, placed.stderr
    order = int(placed.stdout)
    receipt = enqueued.assert_enqueued("send_receipt")
    assert (receipt.queue, receipt.payload) == ("example_shop", {"order": order})
    with captured(db_url) as nothing:
        refused = _manage(db_url, "place_order", "7", "--fail")
    assert refused.returncode != 0 and "rolled back on purpose" in refused.stderr
    nothing.assert_nothing()
    status = _manage(db_url, "txqueue", "status", "--json")
    [queue] = json.loads(status.stdout)["queues"]
    assert (queue["queue"], queue["pending"]) == ("example_shop", 1)

    worked = _manage(db_url, "txqueue", "worker", "--app", "shop.tasks:registry", "--burst")
    assert worked.returncode == 0 and "Traceback" not in worked.stderr, worked.stderr
    [task] = rows(db_url)
    assert task["payload"] == {"order": order} and task["state"] == "succeeded"
    with closing(connect(db_url)) as c:
        orders = [tuple(r) for r in c.execute("SELECT id, total, receipt_sent FROM shop_order")]
    assert orders == [(order, 42, True)]

    # A process pool's children set Django up before they import the tasks and models.
    second = int(_manage(db_url, "place_order", "43").stdout)
    flags = ("--pool", "processes", "--concurrency", "1", "--burst")
    worked = _manage(db_url, "txqueue", "worker", "--app", "shop.tasks:registry", *flags)
    assert worked.returncode == 0 and "Traceback" not in worked.stderr, worked.stderr
    with closing(connect(db_url)) as c:
        sent = [tuple(r) for r in c.execute("SELECT id, receipt_sent FROM shop_order ORDER BY id")]
    assert sent == [(order, True), (second, True)]


def test_the_django_shops_tests_pass_under_djangos_runner_and_pytest_django(db_url: str) -> None:
    """The testing how-to's recipes, the shop's ``TestCase`` and its pytest-django test,
    and the admin's txqueue pages in Django's test client (shop/test_admin.py), each on a
    test database of the runner's making, their tasks run in the test's transaction."""
    tested = _manage(db_url, "test", "--noinput")
    assert tested.returncode == 0 and "Ran 8 tests" in tested.stderr, tested.stderr
    pytested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT / "examples" / "django_project",
        env=_django_env(db_url, {}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert pytested.returncode == 0 and "9 passed" in pytested.stdout, pytested.stdout


def test_django_takes_the_broker_from_settings_and_the_environment_wins(
    pg_url: str, amqp_url: str, tmp_path: Path
) -> None:
    setting = {"AMQP_URL": amqp_url}  # the example's settings.py: TXQUEUE_AMQP_URL
    broker.delete_queue(amqp_url, "example_shop")
    migrated = _manage(pg_url, "migrate", **setting)
    assert migrated.returncode == 0, migrated.stderr
    malformed = _manage(pg_url, "place_order", "1", AMQP_URL="http://guest:secret@mq/")
    assert malformed.returncode != 0 and "secret" not in malformed.stderr
    assert "settings.TXQUEUE_AMQP_URL: AMQP URL must look like" in malformed.stderr
    worker: subprocess.Popen[bytes] | None = None
    try:
        placed = _manage(pg_url, "place_order", "42", **setting)
        assert placed.returncode == 0, placed.stderr
        assert broker.check(amqp_url, ["example_shop"]) == {"example_shop": 1}

        # TXQUEUE_AMQP_URL in the environment wins: its broker (none there) is tried, and
        # the settings' gets nothing.
        nowhere = f"amqp://guest:guest@127.0.0.1:{free_port()}/"
        overridden = _manage(pg_url, "place_order", "43", TXQUEUE_AMQP_URL=nowhere, **setting)
        assert overridden.returncode == 0, overridden.stderr
        assert f"RabbitMQ unreachable at {nowhere.replace('guest@', '***@')}" in overridden.stderr
        assert broker.check(amqp_url, ["example_shop"]) == {"example_shop": 1}

        log = tmp_path / "worker.out"
        with log.open("wb") as out:
            worker = subprocess.Popen(
                [sys.executable, "manage.py", "txqueue", "worker", "--app", "shop.tasks:registry"],
                cwd=ROOT / "examples" / "django_project",
                env=_django_env(pg_url, setting),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        # The worker consumes the settings' broker, and polls for the task it was not told of.
        wait_until(lambda: count(pg_url, "state = 'succeeded'") == 2, timeout=30)
        assert "consuming txqueue.example_shop" in log.read_text()
        assert broker.check(amqp_url, ["example_shop"]) == {"example_shop": 0}
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
        broker.delete_queue(amqp_url, "example_shop")
    assert worker.returncode == 0, log.read_text()  # a clean stop on SIGTERM
