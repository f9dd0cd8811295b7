"""How-to "Coming from Celery": txqueue's side of each comparison, run in turn."""

import os

dsn = os.environ["TXQUEUE_DATABASE_URL"]
with __import__("psycopg").connect(dsn, autocommit=True) as setup:
    setup.execute("CREATE TABLE orders (id int PRIMARY KEY)")

# --8<-- [start:enqueue]
from datetime import UTC, datetime
from decimal import Decimal

import psycopg

import txqueue
from shop.tasks import Line, send_receipt

with psycopg.connect(dsn) as conn, txqueue.transaction(conn):
    conn.execute("INSERT INTO orders (id) VALUES (42)")
    task_id = send_receipt.enqueue(conn, order=42, lines=[Line("tea", Decimal("4.50"))])
    send_receipt.options(delay=60).enqueue(conn, order=43, lines=[])  # countdown=60
    send_receipt.options(run_at=datetime(2030, 1, 1, tzinfo=UTC)).enqueue(conn, order=44, lines=[])
    send_receipt.options(priority=10, unique_key="receipt-45", max_attempts=10).enqueue(
        conn, order=45, lines=[]
    )
# the tasks exist if and only if this block committed
# --8<-- [end:enqueue]

with psycopg.connect(dsn) as conn:
    assert len(txqueue.list_tasks(conn)) == 4

# --8<-- [start:retries]
import txqueue

registry = txqueue.Registry()


@registry.task(queue="crm", max_attempts=5, backoff=2.0, timeout=60, time_limit=60)
def sync_crm(customer: int) -> None: ...


# --8<-- [end:retries]

# --8<-- [start:context]
from datetime import date

import txqueue

registry = txqueue.Registry()


@registry.task(queue="reports", context=True)
def build_report(ctx: txqueue.TaskContext, day: date) -> dict[str, int]:
    print(ctx.id, ctx.name, ctx.queue, ctx.attempt, ctx.max_attempts, ctx.worker_id)
    if ctx.cancelled:
        raise RuntimeError("cancelled")  # the task ends cancelled, not retried
    return {"orders": 0}


# --8<-- [end:context]

with psycopg.connect(dsn) as conn:
    report = build_report.enqueue(conn, day=date(2026, 11, 26))
txqueue.Worker(registry, database_url=dsn, amqp_url=None).run(burst=True)
assert build_report.wait(dsn, report, timeout=5) == {"orders": 0}
URL = dsn
import threading

import shop.tasks

worker = txqueue.Worker(shop.tasks.registry, database_url=dsn, amqp_url=None)
threading.Thread(target=worker.run, daemon=True).start()

# --8<-- [start:wait]
import psycopg

import txqueue
from shop.tasks import send_receipt

with psycopg.connect(URL) as conn, txqueue.transaction(conn):
    task_id = send_receipt.enqueue(conn, order=42, lines=[])
print(send_receipt.wait(URL, task_id, timeout=30))  # the str the handler returned
# --8<-- [end:wait]
worker.stop()

# --8<-- [start:periodic]
import txqueue

registry = txqueue.Registry()


@registry.periodic("0 3 * * *", timezone="Europe/Paris", payload={"older_than_days": 30})
@registry.task(queue="maintenance")
def purge_sessions(older_than_days: int) -> int:
    return 0


# --8<-- [end:periodic]

assert [s.name for s in registry.schedules()] == ["purge_sessions"]
