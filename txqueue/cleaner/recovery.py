"""Taking back the tasks of workers that died: each running task whose lease expired, by
its ``on_lease_expired`` policy; and waking the parked tasks whose time came (a sleep
ended, a wait timed out). The cleaner's passes do it, and every worker does it on its own
every ``RECOVER_EVERY`` seconds, so that a task is taken back once its lease ends, or
woken once its time comes, whichever process holds the cleaner's lease and whether or not
a cleaner runs at all.

Two processes recovering at once act on each task once: the rows are locked with
``SKIP LOCKED`` and the update re-checks the expired lease.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..core.lifecycle import ABANDON, CLEANER, COMPENSATE
from ..core.task import CANCELLED, DEFAULT_MAX_ATTEMPTS, PENDING
from ..errors import StoreError
from ..outbox import wakeup
from ..outbox.client import wakeups_of
from ..store.protocols import Upkeep
from ..store.records import Inserted, Recovered
from ..store.roles import Recovering
from ..tasks.registry import FailedTask
from .report import CleanupReport

log = logging.getLogger("txqueue.cleaner")

RECOVER_EVERY = 2.0
"""Seconds between a worker's looks for expired leases: a task whose worker died starts
again at most this long (and a wake-up) after its lease ends."""
RECOVER_AFTER_OUTAGE = 10.0
"""Seconds a worker that lost its database waits, once back, before it looks for expired
leases: the leases of the tasks that ran on through the outage lapsed meanwhile, and
their workers' keepers, back within a second or two, extend them first."""
WORKER_BATCH = 100
"""Expired leases a worker takes back in one look (more are left to its next look, at once)."""


def recover(
    store: Upkeep[Any],
    conn: Any,
    batch_size: int,
    alert: Callable[[FailedTask], None] | None,
    report: CleanupReport,
    wakeups: list[tuple[str, bytes]],
    more: Callable[[], bool] = lambda: True,
    by: str = CLEANER,
) -> bool:
    """Take back the tasks whose lease expired, in batches of ``batch_size`` while
    ``more()`` holds, counting them in ``report`` and adding the wake-ups of those to run
    again (retried tasks, compensations, workflow steps readied) to ``wakeups``; a task
    that failed for good is passed to ``alert`` (its ``on_failed`` hooks). ``by`` names
    who did it in their history. True if the last batch was full: more may be left."""
    full = False
    while more():
        readied: list[tuple[str, Inserted]] = []
        recovered = store.recover_expired(conn, batch_size, DEFAULT_MAX_ATTEMPTS, readied, by)
        for r in recovered:
            _recovered(r, alert, report, wakeups)
        wakeups.extend(wakeups_of(readied))
        full = len(recovered) == batch_size
        if not full:
            break
    return full


def wake_due(
    store: Upkeep[Any],
    conn: Any,
    batch_size: int,
    report: CleanupReport,
    wakeups: list[tuple[str, bytes]],
    more: Callable[[], bool] = lambda: True,
    by: str = CLEANER,
) -> bool:
    """Wake the parked tasks whose time came (a sleep ended, a wait timed out) or whose
    signal is kept, as ``recover`` takes back expired leases: in batches, counted in
    ``report``, their wake-ups added to ``wakeups``. True if the last batch was full."""
    full = False
    while more():
        readied: list[tuple[str, Inserted]] = []
        woken = store.wake_parked(conn, batch_size, readied, by)
        report.woken += woken
        wakeups.extend(wakeups_of(readied))
        full = woken == batch_size
        if not full:
            break
    return full


def _recovered(
    r: Recovered,
    alert: Callable[[FailedTask], None] | None,
    report: CleanupReport,
    wakeups: list[tuple[str, bytes]],
) -> None:
    if r.state == PENDING:
        report.retried += 1
        wakeups.append((r.queue, wakeup.encode(r.id, r.xid)))
        log.info(
            "task %s %s: lease expired (worker %s lost); retrying, attempt %d was lost",
            r.name,
            r.id,
            r.lost_worker,
            r.attempts,
        )
        return
    if r.state == CANCELLED:
        report.cancelled += 1
        log.info("task %s %s: lease expired after a cancel request; cancelled", r.name, r.id)
        return
    report.failed += 1
    if r.policy == ABANDON:
        reason = "lease expired: abandoned"
    elif r.policy == COMPENSATE:
        reason = "lease expired: compensated"
    else:
        reason = "lease expired on the last attempt"
    if r.compensation is not None:  # its wake-up is among those the recovery readied
        report.compensations += 1
    log.error("task %s %s: %s (worker %s lost); failed", r.name, r.id, reason, r.lost_worker)
    if alert is not None:
        alert(FailedTask(r.id, r.name, r.queue, r.payload, r.attempts, reason, r.error))


def by_worker(
    store: Recovering[Any],
    worker_id: str,
    alert: Callable[[FailedTask], None],
    wake: Callable[[list[tuple[str, bytes]]], None],
) -> Callable[[Any], bool]:
    """A worker's own look for expired leases, on its lease keeper's connection: one
    batch of ``WORKER_BATCH`` a look, so that the keeper's heartbeats never wait behind a
    long recovery (False when the batch was full: look again at once). What it takes back
    is woken by ``wake``, its ``on_failed`` hooks run by ``alert`` (off the keeper's
    thread), and it is said in one warning, as the cleaner's passes say it. A refused
    statement is said once and left to the cleaner: raised, it would stop the keeper, and
    with it every lease of the worker."""
    refused = False

    def look(conn: Any) -> bool:
        nonlocal refused
        report = CleanupReport()
        wakeups, woken = list[tuple[str, bytes]](), list[tuple[str, bytes]]()
        try:
            full = recover(store, conn, WORKER_BATCH, alert, report, wakeups, _once(), worker_id)
            if wakeups:
                wake(wakeups)
            if report.retried or report.failed or report.cancelled:
                log.warning("recovered the tasks of workers that died: %s", _counts(report))
            # After the recovery is said: parked tasks are the next look's if this fails.
            full = wake_due(store, conn, WORKER_BATCH, report, woken, _once(), worker_id) or full
        except StoreError as exc:
            if store.is_connection_error(exc):
                raise
            if not refused:
                refused = True
                log.warning("cannot recover expired leases here (%s): left to the cleaner", exc)
            return True
        if woken:
            wake(woken)
        return not full

    return look


def _once() -> Callable[[], bool]:
    """``more`` for one batch."""
    turns = iter([True])
    return lambda: next(turns, False)


def _counts(report: CleanupReport) -> str:
    return (
        f"retried {report.retried}, failed {report.failed}, cancelled {report.cancelled}, "
        f"compensations {report.compensations}"
    )
