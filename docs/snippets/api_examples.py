"""What the API reference's examples take as given (docs/reference/index.md):
tests/integration/test_api_examples.py runs this before each example."""

from txqueue.testing import run_tasks

# --8<-- [start:given]
import os

import psycopg

import txqueue

url = os.environ["TXQUEUE_DATABASE_URL"]  # a PostgreSQL database with txqueue's tables
registry = txqueue.Registry()


@registry.task(queue="emails")
def send_receipt(order: int) -> str:
    return f"receipt {order} sent"


@registry.task(queue="payments", max_attempts=1)
def charge(order: int) -> None:
    raise RuntimeError("card declined")


with psycopg.connect(url) as conn:
    task_id = charge.enqueue(conn, order=42)  # a task that has failed, by the time they run
# --8<-- [end:given]
run_tasks(registry, url)
