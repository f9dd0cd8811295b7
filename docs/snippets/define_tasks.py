"""How-to "Define tasks": every way to call a typed task, run for real."""

import asyncio
import os
from datetime import UTC, datetime, timedelta

import psycopg

import txqueue
from myapp.tasks import Receipt, registry, send_receipt

url = os.environ["TXQUEUE_DATABASE_URL"]


async def enqueue_from_asyncio() -> None:
    async with await psycopg.AsyncConnection.connect(url) as session:
        # --8<-- [start:async]
        await send_receipt.enqueue_async(session, order=42)
        # --8<-- [end:async]


with psycopg.connect(url) as conn:
    # --8<-- [start:calls]
    send_receipt.enqueue(conn, order=42)  # -> uuid.UUID
    send_receipt.enqueue(conn, 42, copy_to=["books@example.com"])
    send_receipt.options(delay=60, unique_key="receipt-42").enqueue(conn, order=42)
    txqueue.enqueue_many(conn, [send_receipt.task(order=n) for n in (1, 2, 3)])
    # --8<-- [end:calls]
    task_id = send_receipt.enqueue(conn, order=7)


# --8<-- [start:expires]
@registry.task(expires=timedelta(minutes=5))  # not started within 5 minutes: not run
def quote_price(order: int) -> None: ...


with psycopg.connect(url) as conn:
    quote_price.enqueue(conn, order=42)
    send_receipt.options(expires=datetime(2030, 1, 1, tzinfo=UTC)).enqueue(conn, order=43)
    # --8<-- [end:expires]
asyncio.run(enqueue_from_asyncio())
txqueue.Worker(registry, database_url=url, amqp_url=None).run(burst=True)
# --8<-- [start:wait]
receipt = send_receipt.wait(url, task_id, timeout=30)  # -> Receipt
send_receipt(42)  # the plain function
# --8<-- [end:wait]
assert receipt == Receipt(7, receipt.total) and str(receipt.total) == "9.90"
with psycopg.connect(url) as conn:
    states = [t.state for t in txqueue.list_tasks(conn, limit=100)]
assert states.count("succeeded") == 9 and states.count("pending") == 1, states  # the delayed one
