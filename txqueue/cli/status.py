"""The operator's read: status (counts, workers, the vacuum horizon)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .. import broker, config
from ..core.task import STATES as ALL_STATES
from ..errors import BrokerError, PermanentError, StoreError
from ..observability.horizon import SEE, Horizon, estimate, span
from ..outbox.wakeup import routed
from ..store.protocols import Connections
from ..store.records import WORKER_ALIVE_WITHIN
from ..store.reports import StatusRow
from ..store.settings import QueueSettings
from .app import (
    AmqpUrl,
    Databases,
    DatabaseUrl,
    JsonFlag,
    _database,
    _warn,
    app,
    each_database,
    friendly,
    labelled,
    out,
)
from .output import print_json, print_table


@app.command()
@friendly
def status(
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
    databases: Databases = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """Task counts by queue and state, the age of the oldest ripe pending task, (with a
    broker) the wake-ups waiting in each RabbitMQ queue, the workers running, the pending
    tasks no running worker has a handler for, and what holds the vacuum horizon back.
    Of several databases (--database, or TXQUEUE_DATABASES), each one's, under its name;
    one out of reach is said, the others shown, and the exit code is 1."""
    threshold = config.vacuum_horizon_warn()
    url = config.amqp_url(amqp_url)

    def one(db_url: str, name: str | None) -> None:
        seen = _seen(db_url, url, name)
        if json_output:
            print_json(out, seen.as_dict(threshold))
        else:
            seen.print(threshold)

    each_database(database_url, databases, json_output, one)


@dataclass
class Seen:
    """One database's status, as ``status`` prints it."""

    queues: dict[str, dict[str, Any]]
    limited: dict[str, QueueSettings]
    broker: bool
    broker_error: str | None
    workers: int | None
    unhandled: list[tuple[str, str, int]]
    horizon: Horizon | None
    wakeups: str

    def as_dict(self, threshold: float) -> dict[str, Any]:
        no_handler = [{"queue": q, "name": n, "pending": c} for q, n, c in self.unhandled]
        return {
            "queues": list(self.queues.values()),
            "workers": self.workers,
            "no_handler": no_handler,
            "vacuum_horizon": None if self.horizon is None else self.horizon.as_dict(threshold),
            "wakeups": self.wakeups,
            "broker_error": self.broker_error,
        }

    def print(self, threshold: float) -> None:
        _print_queues(self.queues, self.limited, self.broker)
        _print_workers(self.workers, self.unhandled)
        _print_horizon(self.horizon, threshold)
        out.print(f"wake-ups: {WAKEUPS[self.wakeups]}")


def _seen(database_url: str, url: str | None, name: str | None) -> Seen:
    """The status of the database at ``database_url`` (named ``name``), and of its queues'
    wake-ups waiting in RabbitMQ at ``url``."""
    with _database(database_url) as (store, conn):
        rows = store.status(conn)
        shown = functools.partial(_shown, store)
        unknown: tuple[int | None, list[tuple[str, str, int]]] = (None, [])
        workers, unhandled = shown(
            lambda: store.unhandled(conn),
            "running workers are not shown (does `txqueue init` need a run?)",
            unknown,
        )
        unlimited: dict[str, QueueSettings] = {}
        limited = shown(
            lambda: {q.queue: q for q in store.queue_settings(conn)},
            "paused and limited queues are not shown",
            unlimited,
        )
        horizon: Horizon | None = shown(
            lambda: estimate(store.vacuum_horizon(conn)), "the vacuum horizon is not shown", None
        )
    wakeups = "rabbitmq" if url else "notify" if store.notifies else "none"
    depths: dict[str, int | None] = {}
    broker_error = None
    if url:
        names = sorted({r[0] for r in rows})
        try:
            found = broker.check(url, [routed(q, name) for q in names])
        except PermanentError:
            raise
        except BrokerError as exc:
            broker_error, url = str(exc), None
            _warn(labelled(name, f"{exc}; wake-ups waiting in RabbitMQ are not shown"))
        else:
            depths = {q: found.get(routed(q, name)) for q in names}
    queues = _queues(rows, limited, depths if url else None)
    return Seen(queues, limited, bool(url), broker_error, workers, unhandled, horizon, wakeups)


T = TypeVar("T")
STATES = ("pending", "running", "succeeded", "failed", "cancelled")
"""The states the table shows; --json counts every state, a workflow's waiting steps too."""


def _shown(store: Connections[Any], read: Callable[[], T], hidden: str, default: T) -> T:
    """``read()``, or ``default`` with a warning that says what is ``hidden`` when the
    database refuses it (a schema older than the read); a lost connection is raised."""
    try:
        return read()
    except StoreError as exc:
        if store.is_connection_error(exc):
            raise
        _warn(f"{exc}; {hidden}")
        return default


def _queues(
    rows: Sequence[StatusRow],
    limited: Mapping[str, QueueSettings],
    depths: Mapping[str, int | None] | None,
) -> dict[str, dict[str, Any]]:
    """Each queue's line, by name: its counts by state, the age of its oldest ripe pending
    task, its flow control, and (``depths``: with a broker) its wake-ups waiting."""
    queues: dict[str, dict[str, Any]] = {}
    for queue, state, count, oldest in rows:
        entry = queues.setdefault(queue, {"queue": queue, "oldest_ripe_pending_s": None})
        entry[state] = count
        if oldest is not None:
            entry["oldest_ripe_pending_s"] = round(oldest, 3)
    for name in limited:
        queues.setdefault(name, {"queue": name, "oldest_ripe_pending_s": None})
    queues = dict(sorted(queues.items()))
    for entry in queues.values():
        for state in ALL_STATES:
            entry.setdefault(state, 0)
        entry["messages"] = None if depths is None else depths.get(entry["queue"])
        settings = limited.get(entry["queue"], QueueSettings(entry["queue"]))
        entry.update({k: v for k, v in settings.as_dict().items() if k != "queue"})
    return queues


def _print_queues(
    queues: Mapping[str, dict[str, Any]], limited: Mapping[str, QueueSettings], broker: bool
) -> None:
    if not queues:
        out.print("no tasks")
    headers = ["queue", *STATES, "oldest ripe pending", *(["messages"] if broker else [])]
    headers += ["flow control"] if limited else []
    table = []
    for entry in queues.values():
        age = entry["oldest_ripe_pending_s"]
        extra = []
        if broker:
            extra.append(str(entry["messages"]) if entry["messages"] is not None else "-")
        if limited:
            flow = limited.get(entry["queue"])
            extra.append("-" if flow is None else flow.describe())
        counts = (str(entry[s]) for s in STATES)
        table.append([entry["queue"], *counts, "-" if age is None else f"{age:.1f}s", *extra])
    if table:
        print_table(out, headers, table, whole=range(1, len(STATES) + 1))


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
