# --8<-- [start:test]
import psycopg
from txqueue.testing import captured, run_tasks

from myapp.tasks import registry, send_receipt


def place_order(conn, order):  # the code under test
    with conn.transaction():
        conn.execute("INSERT INTO orders (id) VALUES (%s)", (order,))
        send_receipt.enqueue(conn, order=order)


def test_an_order_sends_its_receipt(txqueue_postgres, txqueue_clock):
    with psycopg.connect(txqueue_postgres, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
        with captured(txqueue_postgres) as enqueued:
            place_order(conn, 42)
    enqueued.assert_enqueued(send_receipt, order=42)

    ran = run_tasks(registry, txqueue_postgres, clock=txqueue_clock)
    assert [(r.name, r.state) for r in ran] == [("send_receipt", "succeeded")]


# --8<-- [end:test]
