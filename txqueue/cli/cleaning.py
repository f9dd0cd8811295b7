"""The cleaner's command, and the queues' gauges it serves and ``txqueue metrics`` prints:
of one database, or of each of several."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from .. import config, units
from ..cleaner.service import DEFAULT_BATCH, DEFAULT_INTERVAL, Cleaner, CleanerOptions
from ..core.sidebyside import run_each
from ..errors import ConfigError, StoreError
from ..signals import graceful
from ..store import for_url
from . import worker_flags as flags
from .app import (
    AmqpUrl,
    AppSpec,
    Databases,
    DatabaseUrl,
    JsonFlag,
    LogFormat,
    LogFormatOption,
    MetricsHost,
    MetricsPort,
    _logging,
    app,
    friendly,
    labelled,
    load_registry,
    out,
    targets,
    unreached,
)
from .output import print_json


@app.command()
@friendly
def cleaner(
    loop: Annotated[
        bool, typer.Option("--loop/--once", help="Run every --interval, or once (for cron).")
    ] = False,
    interval: Annotated[
        str, typer.Option(help="Seconds between runs with --loop (also sets --grace).")
    ] = f"{DEFAULT_INTERVAL:g}s",
    grace: Annotated[
        str | None,
        typer.Option(
            help="Re-send the wake-up of a ripe task still pending after this long "
            "[default: two intervals].",
            show_default=False,
        ),
    ] = None,
    retain: Annotated[
        str, typer.Option(help="Keep succeeded and cancelled tasks this long.")
    ] = "24h",
    retain_failed: Annotated[str, typer.Option(help="Keep failed tasks this long.")] = "7d",
    batch_size: Annotated[
        int, typer.Option(min=1, max=100_000, help="Rows per statement.")
    ] = DEFAULT_BATCH,
    app_spec: AppSpec = None,
    json_output: JsonFlag = False,
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = "0.0.0.0",
    log_format: LogFormatOption = LogFormat.text,
    verbose: flags.Verbose = False,
    database_url: DatabaseUrl = None,
    databases: Databases = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """Recover tasks whose worker died, re-send lost wake-ups, prune old tasks.

    Prints a one-line summary (--json for monitoring). Exits 1 only when it could not do
    its work (database unreachable; RabbitMQ unreachable or not confirming wake-ups).
    With --loop, --metrics-port serves the queues' gauges (see `txqueue metrics`). With
    several databases (--database, or TXQUEUE_DATABASES), it cleans each, one out of
    reach holding up none of the others, each database's loop led on its own."""
    _logging(verbose, log_format)
    if metrics_port is not None and not loop:
        raise ConfigError("--metrics-port needs --loop: a cron run is gone before a scrape")
    options: CleanerOptions = {
        "interval": units.duration(interval, "--interval"),
        "grace": None if grace is None else units.duration(grace, "--grace"),
        "retain": units.duration(retain, "--retain"),
        "retain_failed": units.duration(retain_failed, "--retain-failed"),
        "batch_size": batch_size,
    }
    registry, url = load_registry(app_spec) if app_spec else None, config.amqp_url(amqp_url)
    cleaners = {
        name: Cleaner(
            database_url=db_url, database=name, amqp_url=url, registry=registry, **options
        )
        for name, db_url in targets(database_url, databases).items()
    }
    if loop:
        _loop(cleaners, metrics_host, metrics_port)
    elif not _once(cleaners, json_output):
        raise typer.Exit(1)


def _once(cleaners: dict[str | None, Cleaner], json_output: bool) -> bool:
    """One pass of each cleaner, its summary printed; whether every one did its work. One
    database out of reach is said, and the others cleaned all the same."""
    reports: dict[str | None, dict[str, Any]] = {}
    ok = True
    for name, c in cleaners.items():
        try:
            report = c.run_once()
        except StoreError as exc:
            if len(cleaners) == 1:
                raise
            unreached(name, exc)
            reports[name], ok = {"ok": False, "error": str(exc)}, False
            continue
        reports[name], ok = report.as_dict(), ok and report.ok
        if not json_output:
            out.print(
                labelled(name, f"cleaner: {report.summary()}"), highlight=False, soft_wrap=True
            )
    if json_output:
        [first, *_] = reports.values()
        print_json(out, first if len(cleaners) == 1 else {"databases": reports})
    return ok


def _loop(cleaners: dict[str | None, Cleaner], metrics_host: str, metrics_port: int | None) -> None:
    """Each cleaner's loop until a signal stops them, serving the queues' gauges if asked."""
    server = None
    if metrics_port is not None:
        from ..observability import metrics

        def gauges(c: Cleaner) -> Any:
            return metrics.queue_registry(
                for_url(c.database_url), c.database_url, lambda: c.vacuum_horizon.seconds
            )

        registries = {name: gauges(c) for name, c in cleaners.items()}
        server = metrics.Server(
            metrics.registry_of(registries),
            lambda: _unhealthy(cleaners),
            metrics_host,
            metrics_port,
        )
    runs = {str(name): c.run for name, c in cleaners.items()}
    try:
        with graceful(lambda: _stop(cleaners)):
            # What stopped one is said as the command's one line, once all have stopped.
            run_each(runs, lambda _name, _exc: _stop(cleaners), "txqueue-cleaner")
    finally:
        if server is not None:
            server.close()


def _stop(cleaners: dict[str | None, Cleaner]) -> None:
    for c in cleaners.values():
        c.stop()


def _unhealthy(cleaners: dict[str | None, Cleaner]) -> str | None:
    """Why ``/healthz`` fails: the cleaner's reason, or of several, every one's."""
    reasons = {name: c.unhealthy() for name, c in cleaners.items()}
    if not all(reasons.values()):
        return None
    return "; ".join(labelled(name, str(why)) for name, why in reasons.items())


@app.command("metrics")
@friendly
def metrics_once(database_url: DatabaseUrl = None, databases: Databases = None) -> None:
    """Print the queues' gauges once, in Prometheus's text format (for node_exporter's
    textfile collector, or a look by hand); needs the metrics extra. Of several databases
    (--database, or TXQUEUE_DATABASES), each one's, with a database label."""
    from ..observability import metrics

    gauges = {
        name: metrics.queue_registry(for_url(url), url)
        for name, url in targets(database_url, databases).items()
    }
    out.print(
        metrics.text(metrics.registry_of(gauges)),
        end="",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
