# --8<-- [start:shop]
# shop.py
import sqlite3

import txqueue
from tasks import send_receipt

conn = sqlite3.connect("txqueue.db", timeout=30)
conn.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, total INTEGER)")

with txqueue.transaction(conn):  # the order and its receipt: both, or neither
    order = conn.execute("INSERT INTO orders (total) VALUES (42) RETURNING id").fetchone()[0]
    send_receipt.enqueue(conn, order=order)

try:
    with txqueue.transaction(conn):
        conn.execute("INSERT INTO orders (total) VALUES (7)")
        send_receipt.enqueue(conn, order=999)
        raise RuntimeError("card declined")  # rolls back the order and its task
except RuntimeError:
    pass
# --8<-- [end:shop]
