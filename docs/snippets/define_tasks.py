"""How-to "Define tasks": every way to call a typed task, run for real."""

import asyncio
import os
from datetime import UTC, datetime, timedelta

import psycopg

import txqueue
from myapp.tasks import Receipt, registry, send_receipt

url = os.environ["TXQUEUE_DATABASE_URL"]


class Pager:  # stands for your alerting
    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, text: str) -> None:
        self.sent.append(text)


pager = Pager()


# --8<-- [start:alerts]
@registry.on_failed  # once a task has failed for good, after that is committed
def alert(failed: txqueue.FailedTask) -> None:
    pager.send(f"{failed.name} {failed.id} failed: {failed.reason}")


@registry.task(max_attempts=1)
def charge(order: int) -> None:
    raise RuntimeError("card declined")


# --8<-- [end:alerts]


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
    charge_id = charge.enqueue(conn, order=7)


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
assert states.count("failed") == 1, states
assert pager.sent == [f"charge {charge_id} failed: attempts exhausted"], pager.sent
