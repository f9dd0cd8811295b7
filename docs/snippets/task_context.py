"""How-to "Define tasks": a handler that takes the context, cancelled while it runs."""

import os
import threading
from datetime import date

import psycopg

import txqueue

url = os.environ["TXQUEUE_DATABASE_URL"]
registry = txqueue.Registry()
rendered: list[tuple[int, bool]] = []
started = threading.Event()


def parts(month: date) -> range:
    return range(1_000)


def render(part: int, draft: bool) -> None:
    rendered.append((part, draft))
    started.set()
    threading.Event().wait(0.01)


# --8<-- [start:context]
@registry.task(queue="reports", context=True)
def build_report(ctx: txqueue.TaskContext, month: date) -> None:
    todo = parts(month)
    for done, part in enumerate(todo):
        if ctx.cancelled:  # someone ran `txqueue cancel` on it
            raise RuntimeError("cancelled")
        render(part, draft=ctx.attempt > 1)
        ctx.progress(done + 1, len(todo), f"part {part}")  # stored once a second at most


# --8<-- [end:context]


with psycopg.connect(url) as conn:
    task_id = build_report.enqueue(conn, month=date(2026, 11, 1))
worker = txqueue.Worker(registry, database_url=url, amqp_url=None)
runner = threading.Thread(target=worker.run)
runner.start()
started.wait(10)
with psycopg.connect(url) as conn:
    assert txqueue.cancel(conn, task_id) == "running"
info = txqueue.wait(url, task_id, timeout=10)
worker.stop()
runner.join(30)
assert info.state == "cancelled" and 0 < len(rendered) < 1_000, (info.state, len(rendered))
# The last progress it reported is kept with its outcome.
assert info.progress is not None and info.progress.done == len(rendered), info.progress
