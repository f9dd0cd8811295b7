"""``txqueue queue``: pause and resume a queue, limit it, show its settings."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..app import DEFAULTS
from ..errors import ConfigError
from ..store.settings import QueueSettings
from .app import AmqpUrl, DatabaseUrl, JsonFlag, _database, friendly, group, out, waking
from .output import print_json, print_table

queue_app = group(
    "queue",
    "A queue's flow control, obeyed by every worker from its next claim: pause, resume, "
    "rate and concurrency limits.",
)

QueueName = Annotated[str, typer.Argument(help="The queue's name.", show_default=False)]


def _print(settings: QueueSettings, json_output: bool) -> None:
    if json_output:
        print_json(out, settings.as_dict())
    else:
        out.print(f"queue {settings.queue}: {settings.describe()}", highlight=False)


@queue_app.command()
@friendly
def pause(
    queue: QueueName, json_output: JsonFlag = False, database_url: DatabaseUrl = None
) -> None:
    """Start none of the queue's tasks until it is resumed; they stay pending, at no cost
    in attempts, and enqueues go on. Running tasks finish."""
    with _database(database_url) as (_, conn):
        settings = DEFAULTS.pause_queue(conn, queue)
    _print(settings, json_output)


@queue_app.command()
@friendly
def resume(
    queue: QueueName,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """Start the queue's tasks again, waking workers for them."""
    with waking(amqp_url), _database(database_url) as (_, conn):
        settings = DEFAULTS.resume_queue(conn, queue)
    _print(settings, json_output)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def _limit(value: str, parse: Any) -> Any:
    return None if value.strip().lower() == "none" else parse(value)


def _concurrency(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"--concurrency: {value!r} is not a number (or none)") from None


@queue_app.command("set")
@friendly
def set_(
    queue: QueueName,
    rate_limit: Annotated[
        str | None,
        typer.Option(
            help="At most this many task starts per period, across every worker: 50/s, "
            "600/min, 5/10s; none removes it.",
            show_default=False,
        ),
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(
            help="At most this many of the queue's tasks running at once, across every "
            "worker; none removes it.",
            show_default=False,
        ),
    ] = None,
    fair_share: Annotated[
        bool | None,
        typer.Option(
            "--fair-share/--no-fair-share",
            help="The keys of the queue's tasks (their concurrency_key) take turns, so that "
            "one key's backlog does not hold back another's tasks.",
            show_default=False,
        ),
    ] = None,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Limit the queue's rate or concurrency, or share it fairly between its tasks' keys
    (a setting not given stays as it is)."""
    if rate_limit is None and concurrency is None and fair_share is None:
        raise ConfigError("give --rate-limit, --concurrency, --fair-share or --no-fair-share")
    limits: dict[str, Any] = {}
    if fair_share is not None:
        limits["fair_share"] = fair_share
    if rate_limit is not None:
        limits["rate_limit"] = _limit(rate_limit, str)
    if concurrency is not None:
        limits["concurrency"] = _limit(concurrency, _concurrency)
    with _database(database_url) as (_, conn):
        settings = DEFAULTS.limit_queue(conn, queue, **limits)
    _print(settings, json_output)


@queue_app.command()
@friendly
def show(
    queue: Annotated[
        str | None,
        typer.Argument(
            help="The queue (default: every paused, limited or fair-share one).", show_default=False
        ),
    ] = None,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
) -> None:
    """A queue's settings, or those of every queue that is paused, limited or shared fairly."""
    with _database(database_url) as (_, conn):
        found = [DEFAULTS.get_queue(conn, queue)] if queue else DEFAULTS.list_queues(conn)
    if json_output:
        print_json(out, {"queues": [s.as_dict() for s in found]})
    elif not found:
        out.print("no queue is paused, limited or shared fairly")
    else:
        docs = [s.as_dict() for s in found]
        rows = [
            [
                d["queue"],
                "yes" if d["paused"] else "no",
                _cell(d["rate_limit"]),
                _cell(d["concurrency"]),
                "yes" if d["fair_share"] else "no",
            ]
            for d in docs
        ]
        print_table(out, ["queue", "paused", "rate limit", "concurrency", "fair share"], rows)
