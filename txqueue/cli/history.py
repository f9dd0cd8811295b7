"""`txqueue history`: what happened to tasks, each state change as its event."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from .. import units
from ..app import DEFAULTS
from ..core.task import STATES
from .app import Databases, DatabaseUrl, JsonFlag, _database, app, each_database, friendly, out
from .output import print_json, print_table


@app.command()
@friendly
def history(
    name: Annotated[str | None, typer.Option(help="Task name.", show_default=False)] = None,
    queue: Annotated[str | None, typer.Option(show_default=False)] = None,
    state: Annotated[
        str | None,
        typer.Option(help=f"The state moved to, one of: {', '.join(STATES)}.", show_default=False),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(help="Who: a worker's id, cleaner, cli:<user>, ...", show_default=False),
    ] = None,
    since: Annotated[str, typer.Option(help="How far back: 90s, 15m, 24h, 7d.")] = "1h",
    limit: Annotated[int, typer.Option(min=1, max=100_000)] = 100,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
    databases: Databases = None,
) -> None:
    """What happened to tasks, newest first: each state change, when, by whom and why (of
    several databases, each one's)."""
    start = datetime.now(UTC) - timedelta(seconds=units.duration(since, "--since"))
    wanted = {"name": name, "queue": queue, "state": state, "by": by}
    each_database(
        database_url,
        databases,
        json_output,
        lambda url, _: _events(url, wanted, start, since, limit, json_output),
    )


def _events(
    url: str,
    wanted: dict[str, str | None],
    start: datetime,
    since: str,
    limit: int,
    json_output: bool,
) -> None:
    with _database(url) as (_, conn):
        found = DEFAULTS.history(
            conn,
            name=wanted["name"],
            queue=wanted["queue"],
            state=wanted["state"],
            by=wanted["by"],
            since=start,
            limit=limit,
        )
    if json_output:
        docs = [
            {"task_id": str(e.task_id), "name": e.name, "queue": e.queue, **e.event.as_json()}
            for e in found
        ]
        print_json(out, {"events": docs})
        return
    if not found:
        out.print(f"no events since {since} ago")
        return
    rows = [
        [
            e.event.at.isoformat(timespec="milliseconds"),
            str(e.task_id),
            e.name,
            e.event.move,
            f"{e.event.from_state} → {e.event.to_state}",
            e.event.by or "-",
            e.event.reason or "",
        ]
        for e in found
    ]
    headers = ["at", "task", "name", "what", "state", "by", "why"]
    print_table(out, headers, rows, whole=(0, 1))
