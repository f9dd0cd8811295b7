"""How-to "Enqueue in your transaction": a task enqueued with an order, on psycopg."""

import os

dsn = os.environ["TXQUEUE_DATABASE_URL"]
with __import__("psycopg").connect(dsn, autocommit=True) as setup:
    setup.execute("CREATE TABLE orders (id int PRIMARY KEY)")

# --8<-- [start:enqueue]
import psycopg

from myapp.tasks import send_receipt  # @registry.task(queue="emails") def send_receipt(order: int)

with psycopg.connect(dsn) as conn:
    with conn.transaction():
        conn.execute("insert into orders (id) values (42)")
        task_id = send_receipt.enqueue(conn, order=42)  # checked by mypy: order is an int
# the task exists if and only if this transaction committed
# --8<-- [end:enqueue]

import txqueue

with psycopg.connect(dsn) as conn:
    info = txqueue.get_task(conn, task_id)
assert (info.name, info.queue, info.payload, info.state) == (
    "send_receipt",
    "emails",
    {"order": 42},
    "pending",
)
