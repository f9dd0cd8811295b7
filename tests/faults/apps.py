"""The registry the fault tests' worker processes run (--app tests.faults.apps:registry)."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from typing import Any

import txqueue

registry = txqueue.Registry()
QUEUE = os.environ.get("TXQUEUE_TEST_QUEUE", "default")
LEASE = float(os.environ.get("TXQUEUE_TEST_LEASE", "2"))


def _note(line: str) -> None:
    # One write per line with O_APPEND: whole lines, even from a process killed mid-run.
    path = os.path.join(os.environ["TXQUEUE_TEST_RECORD_DIR"], f"{os.getpid()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _pid(ctx: txqueue.TaskContext) -> int:
    """The worker's process id (a worker id is host:pid:random), which in a process pool
    is its child's parent: the tests kill, freeze and cut off workers."""
    return int(ctx.worker_id.split(":")[-2])


@registry.task("record", queue=QUEUE, timeout=LEASE, max_attempts=50)
def record(payload: Any, ctx: txqueue.TaskContext) -> dict[str, Any]:
    """Note ``id attempt pid time`` as it starts, then work for ``payload["sleep"]``
    seconds (``payload["first_sleep"]`` on the first attempt, if given)."""
    _note(f"{ctx.id} {ctx.attempt} {_pid(ctx)} {time.time()}\n")
    first = payload.get("first_sleep") if ctx.attempt == 1 else None
    time.sleep(float(payload.get("sleep", 0) if first is None else first))
    return {"pid": _pid(ctx)}


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str() for this one")


@registry.task("hostile", queue=QUEUE, timeout=10, max_attempts=1)
def hostile(payload: Any, ctx: txqueue.TaskContext) -> Any:
    """Whatever a handler should never do, by ``payload["do"]``."""
    _note(f"{ctx.id} {ctx.attempt} {_pid(ctx)}\n")
    match payload["do"]:
        case "nul":
            return "a\x00b"
        case "broken_str":
            raise _Unprintable
        case "system_exit":
            raise SystemExit(3)
        case "keyboard_interrupt":
            raise KeyboardInterrupt
        case "unserializable":
            return {"when": object()}
        case "huge":
            return "x" * 10_000_000
    raise ValueError(payload["do"])


@registry.task("hostile_async", queue=QUEUE, timeout=10, max_attempts=1)
async def hostile_async(payload: Any, ctx: txqueue.TaskContext) -> None:
    _note(f"{ctx.id} {ctx.attempt} {_pid(ctx)}\n")
    raise SystemExit(4)


@registry.task("outlives_its_timeout", queue=QUEUE, timeout=1, max_attempts=1)
def outlives_its_timeout(payload: Any, ctx: txqueue.TaskContext) -> str:
    """Runs 2.5 times its 1 s timeout, heartbeating: it must keep its lease throughout."""
    _note(f"{ctx.id} {ctx.attempt} {_pid(ctx)}\n")
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        if not ctx.heartbeat():
            raise RuntimeError("lease lost")
        time.sleep(0.2)
    return "kept its lease"


@registry.task("exits_hard", queue=QUEUE, timeout=1, max_attempts=2)
def exits_hard(payload: Any, ctx: txqueue.TaskContext) -> str:
    """Takes its worker process down on the first attempt, as a segfaulting extension would."""
    _note(f"{ctx.id} {ctx.attempt} {_pid(ctx)}\n")
    if ctx.attempt == 1:
        os._exit(1)
    return "second attempt"


@registry.task("transfer", queue=QUEUE, timeout=LEASE, max_attempts=50, atomic=True)
def transfer(payload: Any, ctx: txqueue.TaskContext) -> None:
    """Move one unit between two accounts and note the task as applied, on ctx.conn."""
    p = "?" if isinstance(ctx.conn, sqlite3.Connection) else "%s"
    task_id = str(ctx.id)
    _note(f"{task_id} {ctx.attempt} {_pid(ctx)}\n")
    # In the order of the accounts' ids, so that two transfers never deadlock.
    for account, delta in sorted([(payload["src"], -1), (payload["dst"], 1)]):
        ctx.conn.execute(
            f"UPDATE ledger_accounts SET balance = balance + {p}, moved = moved + {p} "
            f"WHERE id = {p}",
            (delta, max(delta, 0), account),
        )
    ctx.conn.execute(f"INSERT INTO ledger_applied (task_id) VALUES ({p})", (task_id,))
    time.sleep(float(payload.get("sleep", 0)))


if os.environ.get("TXQUEUE_TEST_PERIODIC"):
    # catch_up: a slot every worker looked at late (a loaded machine, a worker starting) is
    # enqueued all the same, so a gap in the slots is a slot lost, never a slot waived.
    @registry.periodic(os.environ["TXQUEUE_TEST_PERIODIC"], queue=QUEUE, name="tick", catch_up=True)
    def tick(payload: Any, ctx: txqueue.TaskContext) -> None:
        _note(f"{ctx.id} {ctx.attempt} {_pid(ctx)}\n")


@registry.task("doomed", queue=QUEUE, timeout=LEASE, max_attempts=1)
def doomed(payload: Any, ctx: txqueue.TaskContext) -> None:
    """A workflow's step that fails for good: what waits for it is blocked."""
    _note(f"{ctx.id} {ctx.attempt} {_pid(ctx)} {time.time()}\n")
    raise RuntimeError("doomed")


STEPS = 3
"""The steps of a ``ledger`` task: ``entry 1`` to ``entry 3``."""


def _die_at(ctx: txqueue.TaskContext, point: str, payload: Any) -> None:
    """SIGKILL the worker (and its child, in a process pool) at ``point``, if the payload
    names it, the first time the task reaches it: not by its attempt's number, since a
    task claimed ahead by a worker killed before it started begins at attempt 2."""
    if payload["kill"] != point:
        return
    mark = os.path.join(os.environ["TXQUEUE_TEST_RECORD_DIR"], f"killed-{ctx.id}")
    try:
        os.close(os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        return
    os.kill(_pid(ctx), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _entry(conn: Any, ctx: txqueue.TaskContext, n: int, payload: Any) -> int:
    p = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    conn.execute(f"INSERT INTO ledger (task_id, n) VALUES ({p}, {p})", (str(ctx.id), n))
    _die_at(ctx, f"inside:{n}", payload)  # written, not yet committed with its record
    return n


@registry.task("ledger", queue=QUEUE, timeout=LEASE, max_attempts=50)
def ledger(payload: Any, ctx: txqueue.TaskContext) -> int:
    """``STEPS`` atomic steps, each a ledger row, then a plain one; its worker killed where
    ``payload["kill"]`` says, the first time the task gets there: ``before:N``,
    ``inside:N`` or ``end`` (before the plain step)."""
    total = 0
    for n in range(1, STEPS + 1):
        _die_at(ctx, f"before:{n}", payload)
        total += ctx.atomic_step(f"entry {n}", _entry, ctx, n, payload)
    _die_at(ctx, "end", payload)
    return ctx.step("total", lambda: total)


def _deliver(conn: Any, ctx: txqueue.TaskContext, parcel: int) -> int:
    p = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    conn.execute(f"INSERT INTO ledger (task_id, n) VALUES ({p}, {p})", (str(ctx.id), parcel))
    return parcel


@registry.task("courier", queue=QUEUE, timeout=LEASE, max_attempts=50)
def courier(payload: Any, ctx: txqueue.TaskContext) -> int:
    """Sleeps, waits for its parcel (the signal ``parcel:<its id>``), and delivers it in an
    atomic step; its worker killed where ``payload["kill"]`` says, the first time the task
    gets there: ``before`` the sleep, once ``slept``, once ``received``."""
    _die_at(ctx, "before", payload)
    ctx.sleep(0.2)
    _die_at(ctx, "slept", payload)
    parcel = int(ctx.wait_for(f"parcel:{ctx.id}"))
    _die_at(ctx, "received", payload)
    return int(ctx.atomic_step("deliver", _deliver, ctx, parcel))


@registry.task("packer", queue=QUEUE, timeout=LEASE, max_attempts=50)
def packer(payload: Any, ctx: txqueue.TaskContext) -> int:
    """A dispatcher's child: its worker killed while it runs, if ``payload["kill"]`` is
    ``child``."""
    _die_at(ctx, "child", payload)
    return int(payload["n"]) * 2


@registry.task("dispatcher", queue=QUEUE, timeout=LEASE, max_attempts=50)
def dispatcher(payload: Any, ctx: txqueue.TaskContext) -> int:
    """Starts a packer as its child, waits for it parked, and delivers its result in an
    atomic step; its worker killed where ``payload["kill"]`` says: ``before`` the start,
    once ``started``, in the ``child``, once its result ``returned``."""
    _die_at(ctx, "before", payload)
    child = ctx.start_child(txqueue.Task("packer", payload, queue=ctx.queue))
    _die_at(ctx, "started", payload)
    got = int(ctx.wait_child(child))
    _die_at(ctx, "returned", payload)
    return int(ctx.atomic_step("deliver", _deliver, ctx, got))
