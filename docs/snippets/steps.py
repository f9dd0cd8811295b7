"""How-to "Durable steps": a checkout whose card is charged once, whose payment is
recorded exactly once, and whose receipt mail is retried alone when the mail server fails."""

import os
import uuid

import psycopg

import txqueue
from txqueue.testing import Clock, run_tasks

url = os.environ["TXQUEUE_DATABASE_URL"]
registry = txqueue.Registry()
with psycopg.connect(url, autocommit=True) as setup:
    setup.execute("CREATE TABLE orders (id int PRIMARY KEY, paid_cents int NOT NULL, charge text)")
    setup.execute("INSERT INTO orders VALUES (42, 0, NULL)")
charges: list[str] = []  # the payment provider's side
mail_errors = [ConnectionError("the mail server is down")]  # it fails once


def charge_card(order: int, cents: int) -> str:
    charges.append(f"{order}:{cents}")
    return f"ch_{uuid.uuid4().hex[:8]}"


def send_receipt_mail(order: int, charge: str) -> None:
    if mail_errors:
        raise mail_errors.pop()


# --8<-- [start:checkout]
def record_payment(conn, order: int, charge: str, cents: int) -> int:
    conn.execute(
        "UPDATE orders SET paid_cents = paid_cents + %s, charge = %s WHERE id = %s",
        (cents, charge, order),
    )
    return cents


@registry.task(context=True, max_attempts=5)
def checkout(ctx: txqueue.TaskContext, order: int, cents: int) -> str:
    charge = ctx.step("charge", charge_card, order, cents)  # once, whatever comes next
    ctx.atomic_step("record", record_payment, order, charge, cents)  # exactly once
    ctx.step("receipt", send_receipt_mail, order, charge)  # failed once: retried alone
    return charge


# --8<-- [end:checkout]

with psycopg.connect(url) as conn:
    task_id = checkout.enqueue(conn, order=42, cents=1999)
clock = Clock(url)
ran = run_tasks(registry, url, clock=clock)  # the retry's backoff passed on the clock
clock.reset()
assert [r.state for r in ran] == ["pending", "succeeded"], ran
assert charges == ["42:1999"]  # the second attempt did not charge again

with psycopg.connect(url) as conn:
    # --8<-- [start:show]
    info = txqueue.get_task(conn, task_id)
    for step in info.steps:  # in the order they ran, each with the attempt that ran it
        print(step.name, step.attempt, step.result, f"{step.took * 1000:.1f} ms")
    # --8<-- [end:show]
    paid = conn.execute("SELECT paid_cents, charge FROM orders WHERE id = 42").fetchone()
assert paid == (1999, ran[-1].result), paid
assert [(s.name, s.attempt) for s in info.steps] == [("charge", 1), ("record", 1), ("receipt", 2)]
