"""The ``txqueue`` command's frame: the typer app and its groups, the options its commands
share (one declaration each, or one factory for those alike but in their help), the
wake-ups a command sends, and errors turned into one line on stderr, never a traceback."""

from __future__ import annotations

import enum
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from .. import broker, config, redaction
from ..errors import ConfigError, StoreError, TxQueueError
from ..observability import logs
from ..outbox import client
from ..store import for_url
from ..store.protocols import AnyStore
from ..tasks.registry import Registry
from .output import holding, print_json

app = typer.Typer(
    help="txqueue: a transactional outbox task queue on PostgreSQL or SQLite, woken by RabbitMQ.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help (and in every group()): rich's reads "[metrics]" or "[default: …]" in a
    # help text as markup and drops it, and cuts option names in a narrow terminal.
    rich_markup_mode=None,
)
err = Console(stderr=True)
out = Console()


def group(name: str, help: str, *, listing: bool = False) -> typer.Typer:
    """The command group ``txqueue NAME``. Alone it prints its help, or (``listing``) runs
    its callback, which lists what the group acts on."""
    commands = typer.Typer(
        help=help,
        no_args_is_help=not listing,
        invoke_without_command=listing,
        rich_markup_mode=None,
    )
    app.add_typer(commands, name=name)
    return commands


def env_option(flag: str, envvar: str, help: str) -> Any:
    """An option read from ``envvar`` when not given, which its help names; the help says
    what the default is, if any."""
    return typer.Option(flag, envvar=envvar, show_envvar=True, help=help, show_default=False)


DatabaseUrl = Annotated[
    str | None,
    env_option(
        "--database-url",
        config.DATABASE_ENV,
        "postgresql://user@host:5432/db or sqlite:///file.db [default: sqlite:///txqueue.db].",
    ),
]
Databases = Annotated[
    list[str] | None,
    env_option(
        "--database",
        config.DATABASES_ENV,
        "A PostgreSQL database of several, NAME=URL, or the NAME of one in "
        f"{config.DATABASES_ENV}; repeat for more. Without --database-url, every one "
        f"given (default: all of {config.DATABASES_ENV}).",
    ),
]
AmqpUrl = Annotated[
    str | None,
    env_option(
        "--amqp-url",
        config.AMQP_ENV,
        "RabbitMQ URL, e.g. amqp://guest:guest@host:5672/. Unset: wake-ups by PostgreSQL "
        "NOTIFY (on SQLite, within the enqueuing process only), and polls.",
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts and monitoring.")]
MetricsPort = Annotated[
    int | None,
    typer.Option(
        min=0,
        max=65535,
        help="Serve Prometheus /metrics and /healthz on this port (needs the metrics extra).",
        show_default=False,
    ),
]
MetricsHost = Annotated[str, typer.Option(help="The address --metrics-port listens on.")]

F = TypeVar("F", bound=Callable[..., Any])


def friendly(fn: F) -> F:
    """Turn txqueue's errors into one line on stderr and exit code 1."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TxQueueError as exc:
            err.print(f"txqueue: error: {exc}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


class LogFormat(enum.StrEnum):
    text = "text"
    json = "json"


LogFormatOption = Annotated[
    LogFormat,
    typer.Option(
        "--log-format",
        help="text, or json: one object per line (time, level, logger, message, task fields).",
    ),
]


def _logging(verbose: bool, log_format: LogFormat = LogFormat.text) -> logs.TaskLogFilter:
    return logs.configure(logging.DEBUG if verbose else logging.INFO, log_format.value)


def load_registry(spec: str) -> Registry:
    """Import ``module:attribute`` (the current directory is on the path) as a Registry."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--app must look like module:registry, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--app {spec}: cannot import {module_name!r}: {exc}") from None
    except Exception as exc:
        raise ConfigError(
            f"--app {spec}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    registry = getattr(module, attr, None)
    if not isinstance(registry, Registry):
        raise ConfigError(f"--app {spec}: {module_name}.{attr} is not a txqueue.Registry")
    registry.loaded_from = spec
    return registry


@contextmanager
def _database(database_url: str | None, *, create: bool = False) -> Iterator[tuple[AnyStore, Any]]:
    """An autocommit connection to the configured database, and its store."""
    url = config.database_url(database_url)
    store = for_url(url)
    conn = store.connect(url, create=create)
    try:
        yield store, conn
    finally:
        conn.close()


def targets(database_url: str | None, databases: list[str] | None) -> dict[str | None, str]:
    """The databases a command acts on, each URL by its name: ``--database``'s (or
    TXQUEUE_DATABASES's), unless ``--database-url`` (or TXQUEUE_DATABASE_URL) picks one,
    by its name or URL; a URL of none of them is refused, not served unnamed. Of named
    databases, the wake-ups the command sends go to their database's queues."""
    named = _named(databases or [])
    if named:
        client.name_wakeups(True)
    if not database_url:
        if named:
            return {name: url for name, url in named.items()}
        url, name = config.database_target(None)
        return {name: url}
    if database_url in named:
        return {database_url: named[database_url]}
    url, name = config.database_target(database_url)
    if named:
        name = config.name_of(url, named)
        if name is None:
            raise ConfigError(
                "--database-url: not one of the databases given (--database, or "
                f"{config.DATABASES_ENV}): give one or the other"
            )
    return {name: url}


def _named(databases: list[str]) -> dict[str, str]:
    """``--database``'s entries, ``NAME=URL`` or the NAME of one of TXQUEUE_DATABASES."""
    env: dict[str, str] | None = None
    entries = []
    for entry in databases:
        if "=" not in entry:
            env = config.databases() if env is None else env
            if entry not in env:
                raise ConfigError(
                    f"--database {redaction.masked(entry)}: not NAME=URL, nor a name in "
                    f"{config.DATABASES_ENV}"
                )
            entry = f"{entry}={env[entry]}"
        entries.append(entry)
    return config.databases(entries)


def each_database(
    database_url: str | None,
    databases: list[str] | None,
    json_output: bool,
    run: Callable[[str, str | None], None],
) -> None:
    """``run(url, name)``, a command of one database, on each database it is given
    (``targets``): of several, each under its name, its ``--json`` object in
    ``{"databases": {name: …}}``; one out of reach is said, the others done, and the exit
    code is 1."""
    served = targets(database_url, databases)
    if len(served) == 1:
        [(name, url)] = served.items()
        run(url, name)
        return
    docs: dict[str | None, Any] = {}
    for name, url in served.items():
        try:
            if json_output:
                with holding() as held:
                    run(url, name)
                docs[name] = held[0] if held else {}
            else:
                out.rule(f"database {name}")
                run(url, name)
        except StoreError as exc:
            unreached(name, exc)
            docs[name] = {"error": str(exc)}
    if json_output:
        print_json(out, {"databases": docs})
    if any("error" in doc for doc in docs.values()):
        raise typer.Exit(1)


def unreached(name: str | None, exc: StoreError) -> None:
    """Say, as an error, that the database ``name`` of several could not be acted on."""
    err.print(f"txqueue: error: {labelled(name, str(exc))}", markup=False, highlight=False)


def labelled(name: str | None, line: str) -> str:
    """``line``, said of the database ``name`` (as is, of the only one)."""
    return line if name is None else f"{name}: {line}"


def _warn(message: str) -> None:
    err.print(f"txqueue: warning: {message}", markup=False, highlight=False, soft_wrap=True)


@contextmanager
def waking(
    amqp_url: str | None, unconfirmed: str = "wake-ups not confirmed by RabbitMQ; workers will poll"
) -> Iterator[None]:
    """Send the wake-ups of the tasks the block makes ripe through ``--amqp-url``'s broker,
    and warn once it is done if RabbitMQ did not confirm them (workers poll for them)."""
    client.configure(amqp_url=config.amqp_url(amqp_url))
    yield
    if not broker.flush(timeout=3.0):
        err.print(f"txqueue: warning: {unconfirmed}")


def registry_option(use: str) -> Any:
    """``--app``, a registry for ``load_registry`` that a command can do without; ``use``
    ends the help, saying what the command takes from it."""
    return typer.Option(
        "--app", help=f"The task registry, as module:attribute{use}", show_default=False
    )


AppSpec = Annotated[
    str | None,
    registry_option(
        ", for its on_failed hook. Recovery policies are stored with the tasks and need no --app."
    ),
]


def full_flag(what: str) -> Any:
    """``--full``: print ``what`` whole, where a command cuts it short by default."""
    return typer.Option("--full", help=f"Print {what} whole, however long.")


TaskId = Annotated[str, typer.Argument(help="The task's id (a UUID).", show_default=False)]


def read_payload(option: str) -> Any:
    """``--payload``: JSON, or ``@path`` or ``-`` (stdin) for one too large for a command
    line. Neither form is valid JSON, so none is ambiguous."""
    where = "--payload"
    text = option
    try:
        if option == "-":
            where, text = "--payload - (stdin)", sys.stdin.read()
        elif option.startswith("@"):
            where = f"--payload {option}"
            text = Path(option[1:]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: cannot read it: {exc}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{where} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{where} is JSON nested too deeply") from None
