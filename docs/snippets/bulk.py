"""Many tasks at once (docs/how-to/manage.md): tests/integration/test_bulk.py runs both."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import txqueue
from txqueue import TaskFilter


def find(conn: Any) -> list[str]:
    lines = []
    # --8<-- [start:find]
    timed_out = TaskFilter(
        name="charge",
        error="TimeoutError",
        finished_after=datetime.now(UTC) - timedelta(hours=1),
    )
    page = txqueue.find_tasks(conn, timed_out, limit=50)
    while page:
        for task in page:
            lines.append(f"{task.id} {task.errors[-1]['message']}")
        page = txqueue.find_tasks(conn, timed_out, limit=50, before=page[-1].id)
    waiting = txqueue.count_tasks(conn, TaskFilter(queue="imports", state="pending"))
    # --8<-- [end:find]
    lines.append(f"{waiting} pending")
    return lines


def change() -> tuple[int, int, int]:
    # --8<-- [start:bulk]
    retried = txqueue.retry_tasks(
        TaskFilter(name="charge", error="TimeoutError"), by="ops: the gateway is back"
    )
    cancelled = txqueue.cancel_tasks(TaskFilter(queue="imports", payload={"customer": 42}))
    week_ago = datetime.now(UTC) - timedelta(days=7)
    deleted = txqueue.delete_tasks(TaskFilter(state="cancelled", finished_before=week_ago))
    # --8<-- [end:bulk]
    return retried, cancelled, deleted


def dead_letters(conn: Any) -> list[str]:
    lines = []
    # --8<-- [start:dead-letters]
    for group in txqueue.dead_letters(conn):
        lines.append(f"{group.count} x {group.name}: {group.error} ({group.message})")
        if group.error == "builtins.TimeoutError":
            txqueue.retry_tasks(group.where, by="ops: timeouts again")
        elif group.name == "legacy_sync":
            txqueue.delete_tasks(group.where)
    # --8<-- [end:dead-letters]
    return lines
