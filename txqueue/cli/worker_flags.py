"""The flags of ``txqueue worker``: each a ``WorkerSettings`` field (or a cleaner's option)
as the command line gives it; ``txqueue cleaner`` shares ``--verbose``."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from .. import config
from .app import env_option


class Pool(StrEnum):
    threads = "threads"
    processes = "processes"


App = Annotated[
    str,
    typer.Option(
        "--app", help="The task registry to run, as module:attribute (myapp.tasks:registry)."
    ),
]
Queues = Annotated[
    list[str] | None,
    typer.Option(
        "--queues",
        "-q",
        help="Queues to work on (repeat, or comma-separated). Default: the registry's.",
    ),
]
Concurrency = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=1024,
        help="Tasks run at once [default: 8 threads; with --pool processes, a process per CPU].",
        show_default=False,
    ),
]
PoolKind = Annotated[
    Pool,
    typer.Option(
        help="Run handlers on threads, or each in a child process (CPU-bound work, "
        "hard time limits, crashes and leaks contained)."
    ),
]
MaxTasksPerChild = Annotated[
    int | None,
    typer.Option(min=1, help="With --pool processes: replace a child after this many tasks."),
]
MaxMemoryPerChild = Annotated[
    str | None,
    typer.Option(
        help="With --pool processes: replace a child once its memory passes this "
        "(200MB, 1GB), checked after each task.",
        show_default=False,
    ),
]
PollInterval = Annotated[
    float | None,
    typer.Option(
        min=0.001, help="Seconds between idle polls [default: 1; 0.1 when nothing wakes it]."
    ),
]
ShutdownTimeout = Annotated[
    float, typer.Option(min=0, help="Seconds to let running tasks finish on SIGTERM.")
]
Burst = Annotated[
    bool,
    typer.Option(
        help="Run what is ready now, then exit: a task waiting for its backoff or run_at is "
        "not waited for."
    ),
]
RunCleaner = Annotated[
    bool,
    typer.Option(
        "--cleaner/--no-cleaner",
        help="Run the cleaner's passes (re-send lost wake-ups, prune; every worker "
        "recovers dead workers' tasks either way), one worker at a time; --no-cleaner "
        "where `txqueue cleaner` runs apart.",
    ),
]
CleanerInterval = Annotated[str, typer.Option(help="Seconds between the cleaner's passes.")]
Retain = Annotated[
    str, typer.Option(help="The cleaner's passes keep succeeded and cancelled tasks this long.")
]
RetainFailed = Annotated[
    str, typer.Option(help="The cleaner's passes keep failed tasks this long.")
]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Log at DEBUG level.")]
ListenUrl = Annotated[
    str | None,
    env_option(
        "--listen-url",
        config.LISTEN_ENV,
        "A direct PostgreSQL URL to listen for NOTIFY wake-ups on, where --database-url "
        "goes through a transaction pooler (?pgbouncer=true).",
    ),
]
