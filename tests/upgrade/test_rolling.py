"""A rolling upgrade from the previous release, rehearsed as docs/how-to/upgrading.md tells a
user to do it: the previous release's schema, tasks in every state, its workers running and
its producer enqueuing; this release's ``txqueue init`` under them; this release's workers
started beside them; the old workers stopped by SIGTERM, the old producer going on. Then
every committed task ran, each attempt exactly once, and every history reads whole.

Without RabbitMQ: the previous release's workers poll (every 0.1 s with no broker), and this
release's are woken by PostgreSQL's NOTIFY as well.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

import txqueue
from tests.conftest import note
from tests.integration.helpers import wait_until
from txqueue import TaskState

from . import checks
from .apps import NEW_QUEUE, OLD_QUEUE
from .conftest import NEW, OLD, Releases

pytestmark = [pytest.mark.xdist_group("upgrade"), pytest.mark.timeout(240)]

WAIT = 60.0  # seconds, for any one stage on a loaded machine


def _value(db_url: str, sql: str, *params: Any) -> Any:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


def _now(db_url: str) -> datetime:
    """The database's clock, which stamps the orders, the runs and the tasks."""
    now: datetime = _value(db_url, "SELECT clock_timestamp()")
    return now


def _until(what: str, predicate: Callable[[], bool]) -> None:
    try:
        wait_until(predicate, timeout=WAIT, every=0.1)
    except AssertionError:
        raise AssertionError(f"not within {WAIT}s: {what}") from None


def _states(db_url: str, kind: str) -> list[str]:
    with psycopg.connect(db_url) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT t.state FROM upgrade_orders o JOIN txqueue_tasks t ON t.id = o.task_id"
                " WHERE o.kind = %s",
                (kind,),
            )
        ]


def _settled_under_old(db_url: str) -> None:
    """The previous release's workers have made every state: succeeded, failed for good,
    retried, running (the slow task, held at its gate), refused (the stubborn task, retried
    until this release runs it) and cancelled."""
    for kind, state in [("done", "succeeded"), ("doomed", "failed"), ("flaky", "succeeded")]:
        _until(f"{kind} tasks {state}", lambda k=kind, s=state: set(_states(db_url, k)) == {s})
    _until("the slow task running", lambda: _states(db_url, "slow") == ["running"])
    refused = "SELECT count(*) FROM upgrade_runs r JOIN upgrade_orders o USING (task_id)"
    _until(
        "the stubborn task refused", lambda: _value(db_url, refused + " WHERE kind = 'stubborn'")
    )
    _until("a schedule slot enqueued", lambda: _slots_since(db_url, None))
    assert _states(db_url, "cancelled") == ["cancelled"]
    # The delayed tasks ripen about when the migration runs, before or after it as the
    # machine's load has it; the parked ones wait for this release's workers.
    assert set(_states(db_url, "parked")) == {"pending"}


def _ran_by(db_url: str, which: str, since: datetime) -> int:
    sql = "SELECT count(*) FROM upgrade_runs WHERE release = %s AND at > %s"
    count: int = _value(db_url, sql, which, since)
    return count


def _orders_since(db_url: str, since: datetime) -> int:
    count: int = _value(db_url, "SELECT count(*) FROM upgrade_orders WHERE at > %s", since)
    return count


def _slots_since(db_url: str, since: datetime | None) -> int:
    sql = "SELECT count(*) FROM txqueue_tasks WHERE name = 'upgrade.tick' AND run_at > %s"
    count: int = _value(db_url, sql, since or datetime.min.replace(tzinfo=UTC))
    return count


def _unique(releases: Releases) -> uuid.UUID:
    """The previous release's producer enqueues with the unique key a task holds."""
    return uuid.UUID(releases.run(OLD, "tests.upgrade.produce", "unique", "upgrade-key").strip())


def _held(db_url: str) -> uuid.UUID:
    held: uuid.UUID = _value(db_url, "SELECT task_id FROM upgrade_orders WHERE kind = 'held'")
    return held


def _all_ended(db_url: str) -> bool:
    sql = (
        "SELECT count(*) FROM txqueue_tasks WHERE state NOT IN ('succeeded', 'failed',"
        " 'cancelled') AND NOT (name = 'upgrade.tick' AND attempts = 0)"
    )
    return _value(db_url, sql) == 0


def _half_done_workflow(db_url: str) -> uuid.UUID:
    """A workflow of this release, enqueued while only the previous release's workers run:
    they run its first step and end it without readying the second (they know nothing of
    workflows), which this release's workers' cleaner passes then move on."""
    flow = txqueue.Workflow("upgrade")
    first = flow.add(txqueue.Task("upgrade.record", queue=OLD_QUEUE), name="first")
    flow.add(txqueue.Task("upgrade.record", queue=OLD_QUEUE), name="second", after=[first])
    with psycopg.connect(db_url) as conn:
        flow_id = txqueue.enqueue_workflow(conn, flow)
        conn.execute(
            "INSERT INTO upgrade_orders (task_id, kind) SELECT id, 'flow ' || step"
            " FROM txqueue_tasks WHERE workflow_id = %s",
            (flow_id,),
        )
    _until("the first step run", lambda: _states(db_url, "flow first") == ["succeeded"])
    assert _states(db_url, "flow second") == ["waiting"]
    return flow_id


def test_rolling_upgrade_from_the_previous_release(releases: Releases, previous: Path) -> None:
    db = releases.db_url
    releases.run(OLD, "txqueue", "init")
    releases.run(OLD, "tests.upgrade.produce", "fill")
    old = releases.workers(OLD, OLD_QUEUE)
    _settled_under_old(db)
    before = checks.ended_rows(db)
    stop = releases.tmp_path / "stop"
    producer = releases.start(OLD, "producer", "tests.upgrade.produce", "stream", str(stop))
    _until(
        "the old producer enqueuing",
        lambda: _value(db, "SELECT count(*) FROM upgrade_orders WHERE kind = 'stream'") >= 5,
    )

    applied = releases.run(NEW, "txqueue", "init")
    migrated = _now(db)
    assert applied.startswith("applied migrations 10 to "), applied
    assert _states(db, "slow") == ["running"], "the slow task ended before the migration did"
    releases.gate.touch()
    # A key held since before the migration still holds against the previous release.
    assert _unique(releases) == _held(db)
    _half_done_workflow(db)

    new = releases.workers(NEW, f"{OLD_QUEUE},{NEW_QUEUE}")
    for proc in new:
        releases.wait_up(proc)
    _until("the old workers running after the migration", lambda: _ran_by(db, OLD, migrated))
    _until("the new workers running", lambda: _ran_by(db, NEW, migrated) >= 3)
    assert releases.stop(old) == [0, 0]
    old_gone = _now(db)
    _until("the old producer enqueuing after", lambda: _orders_since(db, old_gone) >= 5)
    _until("the held key's task ended", lambda: _states(db, "held") == ["succeeded"])
    again = _unique(releases)
    assert again != _held(db), "a key given back by its ended task still held"
    stop.touch()
    assert producer.wait(WAIT) == 0
    committed, failed = map(int, releases.log(producer).split()[-2:])
    assert failed == 0, releases.log(producer)
    assert committed >= 10
    _until("a schedule slot after the old workers", lambda: _slots_since(db, old_gone))
    _until("every task ended", lambda: _all_ended(db))
    assert releases.stop(new) == [0, 0]
    _verify(db, previous, before, again, migrated, old_gone)


def _verify(
    db: str,
    previous: Path,
    before: dict[uuid.UUID, dict[str, Any]],
    again: uuid.UUID,
    migrated: datetime,
    old_gone: datetime,
) -> None:
    found, ran, committed = checks.tasks(db), checks.runs(db), checks.orders(db)
    checks.every_order_ended(found, committed)
    assert found[again].state == "succeeded"
    checks.each_attempt_ran_once(found, ran, previous)
    checks.history_continuous(found, ran)
    checks.unchanged(before, db)
    assert {r.release for r in ran[_held(db)]} == {NEW}
    # The stranded step was moved on by this release (its history says how), and then ran
    # once, by whichever worker claimed it first.
    flow = {o["kind"]: o["task_id"] for o in committed if o["kind"].startswith("flow")}
    assert [r.release for r in ran[flow["flow first"]]] == [OLD]
    second = found[flow["flow second"]]
    assert [e.from_state for e in second.events][:1] == [TaskState.WAITING], second.events
    slow = next(o["task_id"] for o in committed if o["kind"] == "slow")
    assert [(r.release, r.at > migrated) for r in ran[slow]] == [(OLD, True)]
    stubborn = next(o["task_id"] for o in committed if o["kind"] == "stubborn")
    assert {r.release for r in ran[stubborn][:-1]} == {OLD} and ran[stubborn][-1].release == NEW
    # Each slot of the schedule was enqueued once, by whichever worker kept it, before the
    # migration and after the old workers were gone.
    slots = [t.run_at for t in found.values() if t.name == "upgrade.tick"]
    assert len(slots) == len(set(slots)), sorted(slots)
    assert min(slots) < migrated < old_gone < max(slots), (migrated, old_gone, sorted(slots))
    assert _orders_since(db, migrated) > _orders_since(db, old_gone) > 0
    every = [r for mine in ran.values() for r in mine]
    after = sum(r.release == OLD and r.at > migrated for r in every)
    note(
        "upgrade rehearsal",
        f"{len(found)} tasks, {len(committed)} orders; runs: {len(every)}, by {OLD}"
        f" {sum(r.release == OLD for r in every)} ({after} after init), by this release"
        f" {sum(r.release == NEW for r in every)}; {len(slots)} schedule slots",
    )
