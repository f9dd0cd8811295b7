"""What a user's mypy sees: an enqueue is checked against the handler's signature, and the
result type flows to ``wait``; a step's arguments are checked against its function, whose
result type it returns. Runs ``mypy --strict`` on a small user module."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from mypy import api

USER_MODULE = """
    import uuid
    from dataclasses import dataclass

    import txqueue

    registry = txqueue.Registry()


    @dataclass
    class Receipt:
        order: int


    @registry.task(queue="emails", max_attempts=5)
    def send_receipt(order: int, note: str = "") -> Receipt:
        return Receipt(order)


    @registry.task(context=True)
    async def audit(ctx: txqueue.TaskContext, order: int) -> bool:
        return ctx.attempt > 1


    def correct(conn: object) -> Receipt:
        task_id: uuid.UUID = send_receipt.enqueue(conn, order=42)
        send_receipt.options(delay=60, unique_key="receipt-42").enqueue(conn, 42, note="x")
        ids: list[uuid.UUID] = txqueue.enqueue_many(conn, [send_receipt.task(order=1)])
        assert ids
        return send_receipt.wait("sqlite:///app.db", task_id)


    async def correct_async(conn: object) -> bool:
        task_id = await audit.enqueue_async(conn, order=1)
        return await audit.wait_async("sqlite:///app.db", task_id)


    @registry.task()
    def total(receipts: list[Receipt], seen: list[txqueue.Outcome[bool]]) -> int:
        return len(receipts) + len(seen)


    def workflow(conn: object) -> uuid.UUID:
        flow = txqueue.Workflow("orders")
        receipts = [flow.step(send_receipt, order=n) for n in range(3)]
        checked = flow.step(audit, order=1)
        done: txqueue.Step[int] = flow.step(
            total, flow.results(receipts), seen=flow.outcomes([checked])
        )
        done.after(checked, on_failure="run")
        return txqueue.enqueue_workflow(conn, flow)


    def wrong_workflow(flow: txqueue.Workflow) -> None:
        receipt = flow.step(send_receipt, 1)
        flow.step(send_receipt, order=receipt.result)  # WRONG PARENT
        flow.step(total, flow.results([flow.step(audit, order=1)]), seen=[])  # WRONG JOIN
        flow.step(total, flow.results([receipt]), seen=flow.results([receipt]))  # NOT OUTCOMES


    def charge(order: int, cents: int) -> str:
        return f"ch_{order}_{cents}"


    def record(conn: object, order: int) -> int:
        return order


    async def fetch(url: str) -> bytes:
        return url.encode()


    @registry.task(context=True)
    async def checkout(ctx: txqueue.TaskContext, order: int) -> str:
        charge_id: str = ctx.step("charge", charge, order, cents=100)
        recorded: int = ctx.atomic_step("record", record, order)
        page: bytes = await ctx.step_async("fetch", fetch, "https://example.invalid")
        return f"{charge_id} {recorded} {page!r}"


    async def wrong_steps(ctx: txqueue.TaskContext) -> None:
        ctx.step("charge", charge, "42", cents=1)  # STEP ARGUMENT
        count: int = ctx.step("charge", charge, 1, cents=1)  # STEP RESULT
        ctx.atomic_step("record", record, 1, 2)  # ATOMIC STEP ARGUMENTS
        await ctx.step_async("fetch", fetch, 1)  # ASYNC STEP ARGUMENT


    def wrong(conn: object) -> None:
        send_receipt.enqueue(conn, order="42")  # WRONG TYPE
        send_receipt.enqueue(conn)  # MISSING
        send_receipt.enqueue(conn, order=1, urgent=True)  # UNKNOWN
        audit.enqueue(conn, 1, 2)  # TOO MANY
        text: str = send_receipt.wait("sqlite:///app.db", uuid.uuid4())  # RESULT TYPE
"""


def test_mypy_strict_checks_enqueues_against_the_handler(tmp_path: Path) -> None:
    module = tmp_path / "user_app.py"
    module.write_text(textwrap.dedent(USER_MODULE))
    out, err, status = api.run(
        [
            "--strict",
            "--no-error-summary",
            "--config-file",
            "",
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            str(module),
        ]
    )
    assert err == "", err
    lines = module.read_text().splitlines()
    flagged = {}
    for found in re.finditer(r"user_app\.py:(\d+): error: (.*)\[([a-z-]+)\]$", out, re.M):
        flagged[lines[int(found[1]) - 1].split("# ")[-1]] = found[3]
    assert flagged == {
        "WRONG TYPE": "arg-type",
        "MISSING": "call-arg",
        "UNKNOWN": "call-arg",
        "TOO MANY": "call-arg",
        "RESULT TYPE": "assignment",
        "WRONG PARENT": "arg-type",
        "WRONG JOIN": "arg-type",
        "NOT OUTCOMES": "list-item",
        "STEP ARGUMENT": "arg-type",
        "STEP RESULT": "assignment",
        "ATOMIC STEP ARGUMENTS": "call-arg",
        "ASYNC STEP ARGUMENT": "arg-type",
    }, out
    assert status == 1
