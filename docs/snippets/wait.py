"""How-to "Wait for a result": a typed wait, then txqueue.wait, on tasks a worker runs meanwhile."""

import os
import threading

import psycopg

import txqueue

url = os.environ["TXQUEUE_DATABASE_URL"]
registry = txqueue.Registry()


@registry.task()
def add(a: int, b: int) -> int:
    return a + b


@registry.task(max_attempts=1)
def divide(a: int, b: int) -> float:
    return a / b


with psycopg.connect(url) as conn:
    task_id = add.enqueue(conn, 2, 3)
    failing_id = divide.enqueue(conn, 1, 0)
worker = txqueue.Worker(registry, database_url=url, amqp_url=None)
running = threading.Thread(target=worker.run)
running.start()
shown = []
print = shown.append  # what the snippet prints, kept for the check below

# --8<-- [start:typed]
total = add.wait(url, task_id, timeout=30)  # 5, an int, as add returned it
# --8<-- [end:typed]
print(total)

# --8<-- [start:failed]
try:
    divide.wait(url, failing_id, timeout=30)
except txqueue.TaskFailedError as exc:
    print(exc.info.errors[-1]["type"])  # builtins.ZeroDivisionError
# --8<-- [end:failed]

# --8<-- [start:wait]
info = txqueue.wait(url, task_id, timeout=30)  # or await txqueue.wait_async(...)
if info.state == "succeeded":
    print(info.result)
else:  # "failed" or "cancelled": info.errors says why
    ...
# --8<-- [end:wait]

worker.stop()
running.join(30)
assert shown == [5, "builtins.ZeroDivisionError", 5], shown
