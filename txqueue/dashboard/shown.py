"""What the dashboard's templates show: queue rows, the chart, a task's fields, and the
filters that print ages, times, numbers and JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ..core.stored import TaskInfo
from ..core.task import FAILED, PENDING, SUCCEEDED
from ..store.settings import QueueSettings


def queue_rows(counts: list[Any], flow: dict[str, QueueSettings]) -> list[dict[str, Any]]:
    queues: dict[str, dict[str, Any]] = {}
    for queue in flow:
        queues[queue] = {"name": queue, "ripe": 0, "oldest": None}
    for queue, state, n, ripe, oldest in counts:
        row = queues.setdefault(queue, {"name": queue, "ripe": 0, "oldest": None})
        row[state] = n
        if state == PENDING:
            row["ripe"], row["oldest"] = ripe, oldest
    for name, row in queues.items():
        row["flow"] = flow.get(name, QueueSettings(name))
    return [queues[name] for name in sorted(queues)]


def capped(counts: list[Any], cap: int) -> set[str]:
    """The states whose count reached the cap: their numbers are lower bounds."""
    totals: dict[str, int] = {}
    for _, state, n, _, _ in counts:
        totals[state] = totals.get(state, 0) + n
    return {state for state, n in totals.items() if n >= cap}


def chart(rates: list[Any], cap: int) -> dict[str, Any]:
    """Bars for the last 60 minutes, oldest first, scaled to the busiest minute."""
    per = {(state, ago): n for state, ago, n in rates if 0 <= ago < 60}
    minutes = [
        {"ago": ago, SUCCEEDED: per.get((SUCCEEDED, ago), 0), FAILED: per.get((FAILED, ago), 0)}
        for ago in range(59, -1, -1)
    ]
    top = max((m[SUCCEEDED] + m[FAILED] for m in minutes), default=0)
    for i, m in enumerate(minutes):
        scale = 100 / top if top else 0
        m["x"] = i * 10
        m["ok_h"] = round(m[SUCCEEDED] * scale, 1)
        m["fail_h"] = round(m[FAILED] * scale, 1)
    each = {state: sum(n for s, _, n in rates if s == state) for state in (SUCCEEDED, FAILED)}
    capped = any(n >= cap for n in each.values())
    return {"minutes": minutes, "top": top, "total": sum(each.values()), "capped": capped}


def fields(info: TaskInfo) -> list[tuple[str, Any]]:
    doc = info.as_dict()
    skip = {"payload", "result", "errors", "events", "id", "progress", "workflow_id", "steps"}
    return [(k, "-" if v is None else v) for k, v in doc.items() if k not in skip]


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m"


def at(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def number(n: int | None, capped: bool = False) -> str:
    return f"{n or 0:,}{'+' if capped and n else ''}"


SHOWN = 10_000
"""Characters of a payload or result a task's page shows; `txqueue show --full` has all."""


def pretty(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    if len(text) <= SHOWN:
        return text
    left = len(text) - SHOWN
    return f"{text[:SHOWN]}\n… {left:,} more characters (txqueue show --full prints it whole)"


def totals(counts: list[Any]) -> dict[str, Any]:
    """A database's tasks in each state, its ripe ones and the oldest's age, all queues
    together."""
    row: dict[str, Any] = {"queues": len({c[0] for c in counts}), "ripe": 0, "oldest": None}
    for _, state, n, ripe, oldest in counts:
        row[state] = row.get(state, 0) + n
        if state == PENDING:
            row["ripe"] += ripe
            if oldest is not None:
                row["oldest"] = max(row["oldest"] or 0.0, oldest)
    return row
