"""How-to "Coming from Celery": a chain, the next task enqueued on ctx.conn."""

import os

import psycopg

dsn = os.environ["TXQUEUE_DATABASE_URL"]
with psycopg.connect(dsn, autocommit=True) as setup:
    setup.execute("CREATE TABLE orders (id int PRIMARY KEY, paid int)")
    setup.execute("INSERT INTO orders VALUES (42, NULL)")

# --8<-- [start:chain]
import txqueue

registry = txqueue.Registry()


@registry.task(queue="orders", atomic=True, context=True)
def charge(ctx: txqueue.TaskContext, order: int, cents: int) -> None:
    ctx.conn.execute("UPDATE orders SET paid = %s WHERE id = %s", (cents, order))
    ship.enqueue(ctx.conn, order=order)  # SQLite: ctx.conn is sqlite3, "?" placeholders


@registry.task(queue="orders")
def ship(order: int) -> None: ...


# --8<-- [end:chain]


with psycopg.connect(dsn) as conn:
    charge.enqueue(conn, order=42, cents=990)
txqueue.Worker(registry, database_url=dsn, amqp_url=None).run(burst=True)
with psycopg.connect(dsn) as conn:
    done = sorted((t.name, t.state) for t in txqueue.list_tasks(conn))
    assert conn.execute("SELECT paid FROM orders").fetchone() == (990,)
assert done == [("charge", "succeeded"), ("ship", "succeeded")], done
