"""How-to "Durable steps", sleeps and waits: a refund that waits for a person's approval
(a signal sent in the approver's transaction), reminds them after a day, and gives up
after a week, holding no worker while it waits."""

import os

import psycopg

import txqueue
from txqueue.testing import Clock, run_tasks

url = os.environ["TXQUEUE_DATABASE_URL"]
registry = txqueue.Registry()
reminders: list[int] = []
refunds: list[int] = []


def remind(order: int) -> None:
    reminders.append(order)


def refund(order: int) -> None:
    refunds.append(order)


# --8<-- [start:refund]
@registry.task(context=True)
def refund_order(ctx: txqueue.TaskContext, order: int) -> str:
    try:
        answer = ctx.wait_for(f"refund:{order}", timeout=86400, name="first ask")
    except txqueue.SignalTimeoutError:
        ctx.step("reminder", remind, order)
        try:
            answer = ctx.wait_for(f"refund:{order}", timeout=6 * 86400, name="second ask")
        except txqueue.SignalTimeoutError:
            return "expired"
    if not answer["approved"]:
        return "refused"
    ctx.step("refund", refund, order)
    return "refunded"


# --8<-- [end:refund]

clock = Clock(url)
with psycopg.connect(url) as conn:
    task_id = refund_order.enqueue(conn, order=42)
assert [r.state for r in run_tasks(registry, url)] == ["parked"]  # no worker held

clock.advance(86400 + 1)  # a day: the first ask times out, the reminder goes
assert [r.state for r in run_tasks(registry, url)] == ["parked"]
assert reminders == [42]

with psycopg.connect(url) as conn:
    # --8<-- [start:signal]
    with txqueue.transaction(conn):  # the approver's own transaction
        conn.execute("CREATE TABLE approvals (order_id int, by text)")
        conn.execute("INSERT INTO approvals VALUES (42, 'ops')")
        txqueue.signal(conn, "refund:42", {"approved": True, "by": "ops"})
    # --8<-- [end:signal]
ran = run_tasks(registry, url)
clock.reset()
assert [(r.state, r.result) for r in ran] == [("succeeded", "refunded")], ran
assert (reminders, refunds) == ([42], [42])  # each step once, over three attempts

with psycopg.connect(url) as conn:
    info = txqueue.get_task(conn, task_id)
assert [s.name for s in info.steps] == [
    "first ask until",
    "first ask",
    "reminder",
    "second ask until",
    "second ask",
    "refund",
]
assert (info.attempts, info.max_attempts) == (3, 7)  # two parks, each an attempt more
