"""Running what a test enqueued, on the test's own thread: no broker, no worker threads,
no sleeps. Each task is claimed, run and recorded as a worker does it, by the same store
statements and the worker's own poll and run path (``worker/polls.py``,
``worker/attempts.py``), one at a time; given the test's connection, in its transaction."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..core.lifecycle import FOREVER
from ..core.task import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_TIMEOUT,
    FAILED,
    PARKED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    TaskState,
)
from ..errors import ConfigError, TxQueueError
from ..store.protocols import C, Manage, Queues, Schedules, Store
from ..store.records import ClaimDefaults, Claimed
from ..tasks.registry import Registry
from ..worker.atomic import committed
from ..worker.attempts import Ended, run_attempt
from ..worker.journal import StoreJournal
from ..worker.outcomes import context, failed_task
from ..worker.polls import Polls
from .clock import Clock
from .database import DatabaseOrConnection, Session, session

WORKER_ID = "txqueue-testing"

log = logging.getLogger("txqueue.testing")

_INLINE: ContextVar[bool] = ContextVar("txqueue_inline", default=False)


def running_inline() -> bool:
    """True while ``run_tasks`` runs a handler on the caller's thread, whose database
    connections are the caller's (a test's, maybe in its transaction): a framework's
    wrapper leaves them open, as Django's test client does."""
    return _INLINE.get()


class TooManyTasksError(TxQueueError, AssertionError):
    """``run_tasks`` reached its limit with tasks still to run (a task that enqueues
    itself, or retries that never end).

    Example:

    ```python
    from txqueue.testing import TooManyTasksError, run_tasks


    @registry.task(atomic=True, context=True)
    def again(ctx: txqueue.TaskContext, n: int) -> None:
        again.enqueue(ctx.conn, n + 1)  # a task that enqueues itself forever


    again.enqueue(conn, 0)
    conn.commit()
    try:
        run_tasks(registry, url, limit=10)
    except TooManyTasksError as exc:
        print(exc)
    ```
    """


@dataclass(frozen=True, slots=True)
class Ran:
    """One attempt ``run_tasks`` made: how it ended (``pending`` is a retry to come),
    what the handler returned (as stored: JSON) or the error it raised.

    Example:

    ```python
    from txqueue.testing import run_tasks

    send_receipt.enqueue(conn, order=42)
    conn.commit()
    for ran in run_tasks(registry, url):  # one Ran per attempt
        print(ran.name, ran.attempt, ran.state, ran.result, ran.error)
    ```
    """

    id: uuid.UUID
    name: str
    attempt: int
    state: TaskState
    result: Any = None
    error: dict[str, Any] | None = None


def run_tasks(
    registry: Registry,
    database: DatabaseOrConnection,
    *,
    clock: Clock | None = None,
    limit: int = 100,
) -> list[Ran]:
    """Run the registry's tasks in ``database`` (a URL, or an App) until none is ripe,
    and return every attempt, in the order they ran. Given a connection instead (Django's
    in a ``TestCase``), they are claimed, run and recorded in its transaction, as an
    atomic task's work is in the claim's: they see the test's rows, and what they do is
    rolled back with it.

    Tasks of the registry's names on its queues run one at a time on this thread
    (``async def`` handlers in an event loop of their own), in the order a worker would
    claim them, queue by queue; a task a handler
    enqueues runs in the same call. With ``clock``, a task waiting for its time (a delay,
    a retry's backoff) does not stop the run: the clock is moved to it and it runs, until
    nothing of the registry is left pending. Raises TooManyTasksError after ``limit``
    attempts, and ConfigError if waiting does not move the database's time (in a
    transaction PostgreSQL's stands still; a clock moves only its own database's).

    Example:

    ```python
    from txqueue.testing import run_tasks

    send_receipt.enqueue(conn, order=42)
    conn.commit()
    ran = run_tasks(registry, url)  # on this thread, until none is ripe
    assert [(r.name, r.state) for r in ran] == [("send_receipt", "succeeded")]
    ```
    """
    defaults = ClaimDefaults(registry.claim_defaults(), DEFAULT_TIMEOUT, DEFAULT_MAX_ATTEMPTS)
    ran: list[Ran] = []
    with session(database, WORKER_ID) as on:
        store, conn = on.store, on.conn
        polls: Polls[Any] = Polls(store, WORKER_ID, defaults)
        while True:
            # As a worker's recovery look: a test's sleeps end on its clock, without one.
            store.wake_parked(conn, 1000, [], WORKER_ID)
            task, rate_wait = _claim_one(store, conn, registry.queues(), polls)
            if task is None:
                waiting = _until_next(store, conn, registry) if clock is not None else None
                if rate_wait is not None and (waiting is None or rate_wait < waiting):
                    waiting = rate_wait  # a rate limit holds a task back: wait it out
                elif clock is None or waiting is None:
                    return ran
                _pass(store, conn, clock, waiting)
                continue
            if len(ran) >= limit:
                raise TooManyTasksError(
                    f"run_tasks ran {limit} attempts and tasks are still ripe; "
                    "raise limit= if that is expected"
                )
            ran.append(_run(on, registry, task))


def _pass(store: Schedules[C], conn: C, clock: Clock | None, seconds: float) -> None:
    """Let ``seconds`` pass: on ``clock`` if given, else in real time. ConfigError if the
    database's time did not move with it: waiting again would never end."""
    start = store.now(conn)
    if clock is None:
        time.sleep(seconds)
    else:
        clock.advance(seconds + 0.001)
    if (store.now(conn) - start).total_seconds() < seconds / 2:
        raise ConfigError(
            "run_tasks: the database's time does not move: PostgreSQL's stands still in a "
            "transaction (a TestCase's), and a Clock moves only its own database's"
        )


def _claim_one(
    store: Queues[C], conn: C, queues: list[str], polls: Polls[C]
) -> tuple[Claimed | None, float | None]:
    """A ripe task, claimed; else the seconds until a queue's rate limit lets one start."""
    rate_wait: float | None = None
    for queue in queues:
        polled = polls.poll(conn, queue, 1)
        if polled.claimed:
            return polled.claimed[0], None
        wait = polled.retry_in if polled.held in ("rate", "key") else None
        if wait is not None and store.ripe_tasks(conn, queue, 1):
            rate_wait = wait if rate_wait is None else min(rate_wait, wait)
    return None, rate_wait


def _until_next(store: Store[C, C], conn: C, registry: Registry) -> float | None:
    """Seconds until the next of the registry's tasks that is not ripe yet becomes so (a
    ripe one left unclaimed is another's, or locked: moving the clock would not run it)."""
    now, queues = store.now(conn), set(registry.queues())
    pending = store.list_tasks(conn, state=PENDING, queue=None, name=None, limit=100_000)
    # A sleep, or a wait's timeout (one without a timeout waits for its signal).
    parked = store.list_tasks(conn, state=PARKED, queue=None, name=None, limit=100_000)
    times = [
        t.run_at
        for t in [*pending, *parked]
        if t.run_at > now
        and (t.run_at - now).total_seconds() < FOREVER / 2
        and t.queue in queues
        and registry.get(t.name) is not None
    ]
    return None if not times else (min(times) - now).total_seconds()


def _run(on: Session, registry: Registry, task: Claimed) -> Ran:
    """``task``'s attempt, run by the worker's run path. What differs from a worker's
    handler thread: an atomic task's transaction is the caller's connection's (a savepoint
    if it is in one), an ``async def`` handler gets an event loop of its own, Ctrl-C on
    this thread stops the run instead of failing the attempt, and the outcome is written
    (and ``on_failed`` told) at once."""
    store, conn = on.store, on.conn
    lease = [(task.id, task.attempts, task.timeout)]
    journal = StoreJournal(
        store, lambda call: call(conn), task, WORKER_ID, lambda _: on.driver, thread_bound=True
    )
    ctx = context(
        task,
        WORKER_ID,
        lambda: bool(store.extend_leases(conn, WORKER_ID, lease)),
        journal=journal,
    )
    running = _INLINE.set(True)
    try:
        ended = run_attempt(
            registry.get(task.name),
            task,
            ctx,
            atomic=functools.partial(committed, store, conn, on.driver),
            run_async=asyncio.run,
            escapes=(KeyboardInterrupt,),
        )
    finally:
        _INLINE.reset(running)
    outcome = ended.outcome
    state: str | None = SUCCEEDED
    if isinstance(ended, Ended):  # written here; an atomic task's success was with its work
        state = store.record_outcomes(conn, [ended.outcome]).get(task.id)
        if state == FAILED:
            registry.alert(failed_task(task, ended.reason, ended.outcome.error))
    if outcome is None or state is None:
        return Ran(task.id, task.name, task.attempts, _lost(store, conn, task))
    result = None if outcome.result is None else json.loads(outcome.result)
    return Ran(task.id, task.name, task.attempts, TaskState(state), result, outcome.error)


def _lost(store: Manage[C], conn: C, task: Claimed) -> TaskState:
    """The state of a task whose lease was lost while it ran (recovered by a cleaner the
    handler ran, say): its outcome was not written, so the row says what it became."""
    log.warning(
        "task %s attempt %d: outcome dropped, the lease was lost meanwhile", task.id, task.attempts
    )
    info = store.get_task(conn, task.id)
    return RUNNING if info is None else info.state
