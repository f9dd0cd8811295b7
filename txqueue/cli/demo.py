"""``txqueue demo``: see txqueue work, with a live view of its progress."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated

import typer
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ..demo import Demo, Progress
from .app import AmqpUrl, DatabaseUrl, _logging, app, friendly, out


@app.command()
@friendly
def demo(
    tasks: Annotated[int, typer.Option(min=100, max=100_000, help="How many tasks.")] = 2000,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show the logs.")] = False,
    database_url: DatabaseUrl = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """See txqueue work: workers, a cleaner and a producer on a realistic mix of tasks.

    With nothing configured it uses a throwaway SQLite file and no broker; give URLs to
    run it on PostgreSQL and RabbitMQ. Its tasks are deleted when it ends; txqueue's tables,
    if it had to make them in your database, stay (as `txqueue init` leaves them).
    """
    if verbose:
        _logging(verbose)
    else:
        logging.getLogger("txqueue").setLevel(logging.CRITICAL)
    run = Demo(database_url=database_url, amqp_url=amqp_url, tasks=tasks)
    if out.is_terminal:
        with Live(_progress(None, tasks), console=out, refresh_per_second=10) as live:
            report = run.run(lambda p: live.update(_progress(p, tasks)))
    else:  # a pipe or a file: the live view printed its last frame into the summary
        report = run.run(_phases(tasks))
    table = Table("txqueue demo", "result", title="summary", title_justify="left")
    for key, value in report.rows():
        table.add_row(key, Text(value))
    out.print(table)
    if not report.ok:
        raise typer.Exit(1)


def _phases(total: int) -> Callable[[Progress], None]:
    """A progress callback that prints one line as each phase begins."""
    last = [""]

    def show(p: Progress) -> None:
        if p.phase != last[0]:
            last[0] = p.phase
            line = f"{p.elapsed:5.1f} s  {p.phase}, {p.succeeded + p.failed}/{total} done"
            out.print(line, markup=False, highlight=False, soft_wrap=True)

    return show


def _progress(p: Progress | None, total: int) -> Table:
    grid = Table.grid(padding=(0, 2))
    if p is None:
        grid.add_row("starting workers and the cleaner...")
        return grid
    done = p.succeeded + p.failed
    grid.add_row(Text(p.phase, style="bold"), f"{p.elapsed:5.1f} s")
    grid.add_row(ProgressBar(total=total, completed=done, width=50), f"{done:,}/{total:,}")
    counts = f"pending {p.pending:,}   running {p.running:,}   succeeded {p.succeeded:,}   "
    grid.add_row(Text(counts + f"failed {p.failed:,}"), "")
    return grid
