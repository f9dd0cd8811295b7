"""The examples under examples/, run end to end against the real services."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import httpx

from txqueue import broker

from .helpers import connect, count, drop_schema, execute, rows, wait_until

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.TransportError:
        return False
    return True


def test_fastapi_enqueues_in_the_request_transaction_and_its_worker_runs_the_task(
    pg_url: str, amqp_url: str, tmp_path: Path
) -> None:
    execute(
        pg_url,
        "CREATE TABLE orders (id serial PRIMARY KEY, total int NOT NULL, "
        "receipt_sent boolean NOT NULL DEFAULT false)",
    )
    base = f"http://127.0.0.1:{_free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")}
    env.update(DATABASE_URL=pg_url, TXQUEUE_AMQP_URL=amqp_url)
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
        with httpx.Client(base_url=base, timeout=10) as http:
            order = http.post("/orders", params={"total": 42}).json()["id"]
            wait_until(lambda: http.get(f"/orders/{order}").json()["receipt_sent"], timeout=15)
            refused = http.post("/orders", params={"total": 7, "fail_after_enqueue": True})
        assert refused.status_code == 409
        # The receipt is the handler's own commit; the worker records the task's outcome
        # after it, on another thread (a moment later on a loaded machine).
        wait_until(lambda: count(pg_url, "state = 'running'") == 0, timeout=15)
        [task] = rows(pg_url)
        assert task["payload"] == {"order": order} and task["state"] == "succeeded"
        assert count(pg_url, "name = 'send_receipt'") == 1  # the refused order left no task
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        broker.delete_queue(amqp_url, "example_receipts")
    output = log.read_text()
    # uvicorn shuts down gracefully, then exits by the signal it was given.
    assert server.returncode in (0, -signal.SIGTERM) and "Traceback" not in output, output
    assert "Application shutdown complete" in output, output


def _manage(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TXQUEUE_", "DJANGO_"))}
    env["DATABASE_URL"] = db_url
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT / "examples" / "django_project",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_django_migrates_enqueues_in_atomic_and_runs_handlers_on_the_orm(db_url: str) -> None:
    drop_schema(db_url)
    migrated = _manage(db_url, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    init = _manage(db_url, "txqueue", "init")  # the same schema version, seen from the CLI
    assert init.returncode == 0 and "already up to date" in init.stdout, init.stdout + init.stderr

    placed = _manage(db_url, "place_order", "42")
    assert placed.returncode == 0, placed.stderr
    order = int(placed.stdout)
    refused = _manage(db_url, "place_order", "7", "--fail")
    assert refused.returncode != 0 and "rolled back on purpose" in refused.stderr
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
