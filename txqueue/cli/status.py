"""The operator's read: status (counts, workers, the vacuum horizon)."""

from __future__ import annotations

import json
from typing import Any

from .. import broker, config
from ..errors import BrokerError, PermanentError, StoreError
from ..horizon import SEE, Horizon, estimate, span
from ..store.records import WORKER_ALIVE_WITHIN, QueueSettings
from .app import AmqpUrl, DatabaseUrl, JsonFlag, _database, _warn, app, friendly, out
from .output import print_table


@app.command()
@friendly
def status(
    json_output: JsonFlag = False, database_url: DatabaseUrl = None, amqp_url: AmqpUrl = None
) -> None:
    """Task counts by queue and state, the age of the oldest ripe pending task, (with a
    broker) the wake-ups waiting in each RabbitMQ queue, the workers running, the pending
    tasks no running worker has a handler for, and what holds the vacuum horizon back."""
    threshold = config.vacuum_horizon_warn()
    with _database(database_url) as (store, conn):
        rows = store.status(conn)
        try:
            workers, unhandled = store.unhandled(conn)
        except StoreError as exc:
            if store.is_connection_error(exc):
                raise
            _warn(f"{exc}; running workers are not shown (does `txqueue init` need a run?)")
            workers, unhandled = None, []
        try:
            limited = {q.queue: q for q in store.queue_settings(conn)}
        except StoreError as exc:
            if store.is_connection_error(exc):
                raise
            _warn(f"{exc}; paused and limited queues are not shown")
            limited = {}
        try:
            horizon: Horizon | None = estimate(store.vacuum_horizon(conn))
        except StoreError as exc:
            if store.is_connection_error(exc):
                raise
            _warn(f"{exc}; the vacuum horizon is not shown")
            horizon = None
    url = config.amqp_url(amqp_url)
    wakeups = "rabbitmq" if url else "notify" if store.notifies else "none"
    depths: dict[str, int | None] = {}
    broker_error = None
    if url:
        try:
            depths = broker.check(url, sorted({r[0] for r in rows}))
        except PermanentError:
            raise
        except BrokerError as exc:
            broker_error, url = str(exc), None
    queues: dict[str, dict[str, Any]] = {}
    for queue, state, count, oldest in rows:
        entry = queues.setdefault(queue, {"queue": queue, "oldest_ripe_pending_s": None})
        entry[state] = count
        if oldest is not None:
            entry["oldest_ripe_pending_s"] = round(oldest, 3)
    for name in limited:
        queues.setdefault(name, {"queue": name, "oldest_ripe_pending_s": None})
    queues = dict(sorted(queues.items()))
    states = ("pending", "running", "succeeded", "failed", "cancelled")
    for entry in queues.values():
        for state in states:
            entry.setdefault(state, 0)
        if url:
            entry["messages"] = depths.get(entry["queue"])
        settings = limited.get(entry["queue"], QueueSettings(entry["queue"]))
        entry.update({k: v for k, v in settings.as_dict().items() if k != "queue"})
    if broker_error:
        _warn(f"{broker_error}; wake-ups waiting in RabbitMQ are not shown")
    no_handler = [{"queue": q, "name": n, "pending": c} for q, n, c in unhandled]
    if json_output:
        doc: dict[str, Any] = {
            "queues": list(queues.values()),
            "workers": workers,
            "no_handler": no_handler,
            "vacuum_horizon": None if horizon is None else horizon.as_dict(threshold),
            "wakeups": wakeups,
        }
        if broker_error:
            doc["broker_error"] = broker_error
        out.print_json(json.dumps(doc))
        return
    if not queues:
        out.print("no tasks")
    headers = ["queue", *states, "oldest ripe pending", *(["messages"] if url else [])]
    headers += ["flow control"] if limited else []
    table = []
    for entry in queues.values():
        age = entry["oldest_ripe_pending_s"]
        extra = [str(entry["messages"]) if entry["messages"] is not None else "-"] if url else []
        if limited:
            flow = limited.get(entry["queue"])
            extra.append("-" if flow is None else flow.describe())
        counts = (str(entry[s]) for s in states)
        table.append([entry["queue"], *counts, "-" if age is None else f"{age:.1f}s", *extra])
    if table:
        print_table(out, headers, table, whole=range(1, len(states) + 1))
    _print_workers(workers, unhandled)
    _print_horizon(horizon, threshold)
    out.print(f"wake-ups: {WAKEUPS[wakeups]}")


WAKEUPS = {
    "rabbitmq": "RabbitMQ",
    "notify": "PostgreSQL NOTIFY (no RabbitMQ URL given)",
    "none": "none: workers poll (SQLite; a worker in the enqueuing process is woken at once)",
}
"""How an enqueue configured as this command wakes the workers, as status says it."""


def _print_workers(workers: int | None, unhandled: list[tuple[str, str, int]]) -> None:
    if workers is None:
        return
    within = f"{WORKER_ALIVE_WITHIN:g}s"
    if workers == 0:
        waiting = sum(c for _, _, c in unhandled)
        line = f"\nno worker running (none seen in the last {within}); {waiting} pending"
    else:
        line = f"\n{workers} worker{'s' if workers != 1 else ''} running"
    out.print(line, highlight=False)
    if workers and unhandled:
        out.print("pending tasks that no running worker has a handler for:")
        rows = [[q, n, str(c)] for q, n, c in unhandled]
        print_table(out, ["queue", "name", "pending"], rows, whole=(2,))


def _print_horizon(horizon: Horizon | None, threshold: float) -> None:
    if horizon is None:
        return
    if horizon.holder is None:
        out.print("\nvacuum horizon: not held back", highlight=False)
        return
    line = f"\nvacuum horizon: held back by {horizon.describe()}"
    past = horizon.past(threshold)
    if past:
        line += f"; past {span(threshold)}: dead rows pile up and claims slow down, {SEE}"
    out.print(
        line, style="bold red" if past else None, markup=False, highlight=False, soft_wrap=True
    )
