"""The registry of the process pool's tests: a module's global, which its children import
(``tests/integration/test_pool.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import time
from typing import Any

import txqueue

registry = txqueue.Registry()
_leaked: list[bytes] = []


@registry.task("whoami", context=True)
def whoami(ctx: txqueue.TaskContext, n: int = 0) -> dict[str, Any]:
    ctx.progress(n, 10, "counted")
    return {"pid": os.getpid(), "beat": ctx.heartbeat(), "n": n, "attempt": ctx.attempt}


@registry.task("square")
async def square(n: int) -> int:
    await asyncio.sleep(0.01)
    return n * n


@registry.task("crash", max_attempts=2, backoff=lambda _: 0.2, context=True)
def crash(ctx: txqueue.TaskContext, how: str) -> str:
    """Dies on its first attempt, by ``how``; its second succeeds."""
    if ctx.attempt == 1:
        if how == "exit":
            os._exit(7)
        if how == "segfault":
            ctypes.string_at(0)
        if how == "oom":  # what the kernel's OOM killer does
            os.kill(os.getpid(), signal.SIGKILL)
    return f"survived {how}"


@registry.task("spin", time_limit=2, max_attempts=2, backoff=lambda _: 0.5)
def spin() -> None:
    """Pure Python that never ends."""
    while True:
        pass


@registry.task("stubborn", time_limit=1, max_attempts=1)
def stubborn() -> None:
    """Swallows its time limit: only the kill after the grace ends it."""
    while True:
        with contextlib.suppress(txqueue.TimeLimitError):
            time.sleep(10)


@registry.task("dawdle", time_limit=1, max_attempts=1)
async def dawdle() -> None:
    await asyncio.sleep(30)


@registry.task("doze", time_limit=1, max_attempts=1)
def doze(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


@registry.task("freeze", time_limit=3, max_attempts=1, context=True)
def freeze(ctx: txqueue.TaskContext) -> None:
    ctx.progress(0, message="asleep")  # seen by the test: it may stop this process now
    time.sleep(60)


@registry.task("sleep")
def sleep(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


@registry.task("until_cancelled", context=True)
def until_cancelled(ctx: txqueue.TaskContext) -> None:
    deadline = time.monotonic() + 30
    while not ctx.cancelled and time.monotonic() < deadline:
        time.sleep(0.05)
    raise RuntimeError("stopped on cancel")


@registry.task("leak")
def leak() -> int:
    """Keeps a megabyte more at each call (its pages touched: resident)."""
    _leaked.append(os.urandom(2**20))
    return os.getpid()


@registry.task("deposit", atomic=True, context=True)
def deposit(ctx: txqueue.TaskContext, amount: int) -> int:
    ctx.conn.execute("INSERT INTO pool_ledger (amount) VALUES (%s)", (amount,))
    return os.getpid()


@registry.task("nap_then_wait", context=True)
def nap_then_wait(ctx: txqueue.TaskContext, key: str) -> list[Any]:
    ctx.sleep(0.5)
    return [ctx.wait_for(key), os.getpid()]


@registry.task("fan_out", context=True)
def fan_out(ctx: txqueue.TaskContext, n: int) -> list[Any]:
    ids = [ctx.start_child(square.options(queue=ctx.queue).task(i)) for i in range(n)]
    return [ctx.wait_child(i) for i in ids]
