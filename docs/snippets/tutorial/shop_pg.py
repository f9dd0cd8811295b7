# --8<-- [start:shop]
# shop_pg.py
import os

import psycopg

import txqueue
from tasks import send_receipt

with psycopg.connect(os.environ["TXQUEUE_DATABASE_URL"]) as conn:
    conn.execute("CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, total int)")
    with txqueue.transaction(conn):
        order = conn.execute("INSERT INTO orders (total) VALUES (42) RETURNING id").fetchone()[0]
        task_id = send_receipt.enqueue(conn, order=order)

print(send_receipt.wait(os.environ["TXQUEUE_DATABASE_URL"], task_id, timeout=10))
txqueue.flush()  # a short script: wait for RabbitMQ to confirm its wake-ups
# --8<-- [end:shop]
