"""What the rehearsal asserts once every task has ended, read from the database: the tasks'
rows (through this release's API, as a user reads them after the upgrade), the orders the
producers committed, and the runs the handlers recorded."""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

import txqueue
from txqueue import TaskInfo, TaskState

from . import release
from .conftest import NEW, OLD

FINAL = {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED}
EXPECTED = {"doomed": TaskState.FAILED, "cancelled": TaskState.CANCELLED}


@dataclass(frozen=True)
class Run:
    attempt: int
    worker_id: str
    release: str
    code: str
    raised: bool
    at: datetime


def runs(db_url: str) -> dict[uuid.UUID, list[Run]]:
    """Every handler run, by task, in attempt order."""
    out: dict[uuid.UUID, list[Run]] = defaultdict(list)
    with psycopg.connect(db_url) as conn:
        for task_id, *fields in conn.execute(
            "SELECT task_id, attempt, worker_id, release, code, raised, at FROM upgrade_runs"
            " ORDER BY task_id, attempt, at"
        ):
            out[task_id].append(Run(*fields))
    return out


def orders(db_url: str) -> list[dict[str, Any]]:
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        return conn.execute("SELECT task_id, kind, at FROM upgrade_orders").fetchall()


def tasks(db_url: str) -> dict[uuid.UUID, TaskInfo]:
    """Every task in the table, as ``txqueue.get_task`` shows it."""
    with psycopg.connect(db_url) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM txqueue_tasks")]
        return {task_id: txqueue.get_task(conn, task_id) for task_id in ids}


def every_order_ended(found: dict[uuid.UUID, TaskInfo], committed: list[dict[str, Any]]) -> None:
    """No committed task lost; each in the final state its kind was made for."""
    missing = [o["task_id"] for o in committed if o["task_id"] not in found]
    assert not missing, f"{len(missing)} committed tasks are gone: {missing[:5]}"
    for o in committed:
        info = found[o["task_id"]]
        expected = EXPECTED.get(o["kind"], TaskState.SUCCEEDED)
        assert info.state == expected, f"{o['kind']} task {info.id}: {info.state}"
    # A schedule's slot enqueued just before the last worker stopped may wait, unstarted.
    for info in found.values():
        assert info.state in FINAL or (info.name == "upgrade.tick" and info.attempts == 0), info


def each_attempt_ran_once(
    found: dict[uuid.UUID, TaskInfo], ran: dict[uuid.UUID, list[Run]], previous: Any
) -> None:
    """Each attempt a task counts ran exactly once, by the code of the release that said it
    ran it; a task succeeded on its last attempt only, after failing every earlier one."""
    codes = {OLD: str(previous / "txqueue"), NEW: str(release.ROOT / "txqueue")}
    assert set(ran) <= set(found), "a run of a task that is not in the table"
    for task_id, info in found.items():
        mine = ran.get(task_id, [])
        assert [r.attempt for r in mine] == list(range(1, info.attempts + 1)), (info, mine)
        for r in mine:
            assert r.code == codes[r.release], r
        if info.state == TaskState.SUCCEEDED:
            assert [r.raised for r in mine] == [True] * (info.attempts - 1) + [False], mine
        if info.state == TaskState.FAILED:
            assert all(r.raised for r in mine), mine


def history_continuous(found: dict[uuid.UUID, TaskInfo], ran: dict[uuid.UUID, list[Run]]) -> None:
    """Each task's history tells every attempt it had, across the releases: each failed
    attempt by its entry in ``errors`` (both releases write them, with the attempt and the
    worker), each attempt this release ran by its events (its claim by that worker, and its
    end), and the task's state by its last event where this release made the last change.
    The previous release writes no events, so the attempts it ran have none, before the
    upgrade or after it."""
    for task_id, info in found.items():
        mine = ran.get(task_id, [])
        failed = [(r.attempt, r.worker_id) for r in mine if r.raised]
        assert [(e["attempt"], e["worker_id"]) for e in info.errors] == failed, info
        by_new = {r.attempt: r.worker_id for r in mine if r.release == NEW}
        claims = {e.attempt: e.by for e in info.events if e.move == "claimed"}
        ends = [e.attempt for e in info.events if e.from_state == TaskState.RUNNING]
        assert claims == by_new, (info.events, mine)
        assert ends == sorted(by_new), (info.events, mine)
        if mine and mine[-1].release == NEW:
            assert info.events[-1].to_state == info.state, info.events


def ended_rows(db_url: str) -> dict[uuid.UUID, dict[str, Any]]:
    """The tasks that have ended, as their rows hold them (read without either release)."""
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        found = conn.execute(
            "SELECT id, state, attempts, errors, result, finished_at FROM txqueue_tasks"
            " WHERE state IN ('succeeded', 'failed', 'cancelled')"
        ).fetchall()
    return {row.pop("id"): row for row in found}


def unchanged(before: dict[uuid.UUID, dict[str, Any]], db_url: str) -> None:
    """The tasks that had ended before the upgrade read as they did: same state, attempts,
    errors, result, end."""
    assert before, "no task had ended before the upgrade"
    after = ended_rows(db_url)
    for task_id, row in before.items():
        assert after.get(task_id) == row, (row, after.get(task_id))
