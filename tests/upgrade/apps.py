"""The rehearsal's tasks, run by the previous release's workers and by this release's: only
what both releases' APIs offer. Each run is recorded durably before the handler returns or
raises (a row of ``upgrade_runs``: task, attempt, worker, which release's code ran it), so
a task run twice, or an attempt run by a worker that does not say so, shows.

``UPGRADE_RELEASE`` names the release the worker was started as; ``code`` is where the
``txqueue`` it imported lives, which the test checks against it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg

import txqueue
from txqueue import Registry, TaskContext

RELEASE = os.environ.get("UPGRADE_RELEASE", "unknown")
CODE = str(Path(txqueue.__file__).resolve().parent)
OLD_QUEUE = "work"  # the previous release's workers work on it alone
NEW_QUEUE = "later"  # tasks left pending through the upgrade, for this release's workers
GATE_WAIT = 90.0  # how long the slow task waits for its gate before it goes on anyway

registry = Registry()


class Refused(Exception):
    """Raised by a handler on purpose: an attempt that fails."""


def _record(ctx: TaskContext, raised: bool) -> None:
    with psycopg.connect(os.environ["TXQUEUE_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO upgrade_runs (task_id, attempt, worker_id, release, code, raised)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (ctx.id, ctx.attempt, ctx.worker_id, RELEASE, CODE, raised),
        )


@registry.task("upgrade.record", queue=OLD_QUEUE, context=True)
def record(ctx: TaskContext, n: int = 0) -> int:
    _record(ctx, raised=False)
    return n


@registry.task("upgrade.fail", queue=OLD_QUEUE, max_attempts=2, backoff=0.1, context=True)
def fail(ctx: TaskContext) -> None:
    _record(ctx, raised=True)
    raise Refused(f"attempt {ctx.attempt} refused")


@registry.task("upgrade.flaky", queue=OLD_QUEUE, max_attempts=3, backoff=0.1, context=True)
def flaky(ctx: TaskContext) -> str:
    _record(ctx, raised=ctx.attempt == 1)
    if ctx.attempt == 1:
        raise Refused("the first attempt is refused")
    return "done"


def every_second(attempt: int) -> float:
    """A retry a second later, however many came before (not the default's doubling, which
    would leave the stubborn task waiting a minute after a long first half)."""
    return 1.0


# Refused by every worker of the previous release, done by this one's: its history starts
# under one release and ends under the other, whatever the timing.
@registry.task(
    "upgrade.stubborn", queue=OLD_QUEUE, max_attempts=100, backoff=every_second, context=True
)
def stubborn(ctx: TaskContext) -> str:
    old = RELEASE != "new"
    _record(ctx, raised=old)
    if old:
        raise Refused(f"release {RELEASE} refuses it")
    return "done"


# Held running until the test opens its gate (a file), so that it is running under a worker
# of the previous release while ``txqueue init`` migrates, and ends after.
@registry.task("upgrade.slow", queue=OLD_QUEUE, timeout=120, context=True)
def slow(ctx: TaskContext) -> None:
    gate = Path(os.environ["UPGRADE_GATE"])
    deadline = time.monotonic() + GATE_WAIT
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    _record(ctx, raised=False)


@registry.task("upgrade.parked", queue=NEW_QUEUE, context=True)
def parked(ctx: TaskContext, n: int = 0) -> int:
    _record(ctx, raised=False)
    return n


@registry.periodic("*/2 * * * * *", name="upgrade.tick")
@registry.task("upgrade.tick", queue=OLD_QUEUE, context=True)
def tick(ctx: TaskContext) -> None:
    _record(ctx, raised=False)
