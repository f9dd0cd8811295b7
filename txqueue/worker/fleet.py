"""One process serving several named databases: a worker per database, each with its own
connections, threads, leases, cleaner and wake-up queues."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from typing import Any, Unpack

from .. import config
from ..core.sidebyside import run_each
from ..errors import ConfigError
from ..observability.telemetry import WorkerState
from ..tasks.registry import Registry
from .beside import beside
from .core import Worker
from .settings import WorkerSettings, worker_id

log = logging.getLogger("txqueue.worker")

NOT_PER_DATABASE = ("database_url", "database", "listen_url")
"""Settings a fleet cannot give each of its workers alike."""


class Fleet:
    """Runs the registry's tasks in each of several named PostgreSQL databases
    (``config.databases``: ``databases``, else TXQUEUE_DATABASES), which ``txqueue init``
    has named: a ``Worker`` per database, with ``settings`` each (so ``concurrency`` is
    per database), woken through that database's RabbitMQ queues or NOTIFY.

    Each database is served apart, so a backlog in one takes no thread from another, and
    one out of reach stops nothing else: its worker waits for it and says so, the others
    work on.

    Example:

    ```python
    app = txqueue.App(registry, databases={"shop": url}, amqp_url=None)  # or several
    app.init()  # records the name "shop" in that database
    send_receipt.options(app=app).enqueue(conn, order=42)
    conn.commit()
    fleet = txqueue.Fleet(registry, app.databases, amqp_url=None)  # what app.fleet() makes
    fleet.run(burst=True)  # each database's ready tasks, then return
    print(fleet.workers["shop"].stats["succeeded"])  # 1
    ```
    """

    def __init__(
        self,
        registry: Registry,
        databases: Mapping[str, str] | None = None,
        **settings: Unpack[WorkerSettings],
    ) -> None:
        named = config.databases(databases)
        if not named:
            raise ConfigError(
                f"databases: none named; give databases= or set {config.DATABASES_ENV}"
            )
        given = sorted(k for k in NOT_PER_DATABASE if settings.get(k) is not None)
        if given:
            raise ConfigError(f"{given[0]}: a Fleet's workers cannot share one")
        settings["worker_id"] = settings.get("worker_id") or worker_id()
        self.worker_id = settings["worker_id"]
        self.metrics_port, self.metrics_host = config.metrics_address(
            settings.pop("metrics_port", None), settings.pop("metrics_host", "0.0.0.0")
        )
        self.workers: dict[str, Worker] = {}
        for name, url in named.items():
            own: WorkerSettings = {**settings, "database_url": url, "database": name}
            self.workers[name] = Worker(registry, **own)
        if self.metrics_port is not None:
            for w in self.workers.values():
                w.measured()  # the extra: a one-line error here, at start-up, without it

    @property
    def stats(self) -> dict[str, int]:
        """The workers' counts since start, added up (each its own: ``workers[name].stats``)."""
        total: Counter[str] = Counter()
        for w in self.workers.values():
            total.update(w.stats)
        return dict(total)

    @property
    def unfinished(self) -> int:
        return sum(w.unfinished for w in self.workers.values())

    @property
    def left_behind(self) -> int:
        return sum(w.left_behind for w in self.workers.values())

    @property
    def late(self) -> list[str]:
        return [f"{name}: {part}" for name, w in self.workers.items() for part in w.late]

    def state(self) -> dict[str, WorkerState]:
        """Each database's worker now."""
        return {name: w.state() for name, w in self.workers.items()}

    def unhealthy(self) -> str | None:
        """Why the fleet is not healthy: a worker, or a part of one, is not running, or no
        database can be reached. One database out of reach is no reason to restart the
        process, and with it the others' workers."""
        reasons = {name: w.unhealthy() for name, w in self.workers.items()}
        stopped = [f"{n}: {why}" for n, why in reasons.items() if why and why.startswith("not")]
        if stopped:
            return "; ".join(stopped)
        if all(reasons.values()):
            return "no database is reachable: " + "; ".join(f"{n}: {w}" for n, w in reasons.items())
        return None

    def stop(self, *, now: bool = False) -> None:
        """Stop every database's worker (``Worker.stop``)."""
        for w in self.workers.values():
            w.stop(now=now)

    def wait_consuming(self, timeout: float = 10.0) -> bool:
        """True once every worker consumes its wake-ups (``Worker.wait_consuming``)."""
        return all(w.wait_consuming(timeout) for w in self.workers.values())

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[Fleet]:
        """``Worker.serving``, for every database."""
        async with beside(self.run, self.stop, f"fleet {self.worker_id}"):
            yield self

    def run(self, *, burst: bool = False) -> None:
        """Run every database's worker until ``stop()`` (``burst``: each until nothing is
        ready in its database). A worker that stops on an error stops the others, and
        its error is raised here."""
        server = self._serve_metrics()
        try:
            self._run(burst)
        finally:
            if server is not None:
                server.close()

    def _serve_metrics(self) -> Any:
        """``/metrics`` of every database's worker, labelled by database, and ``/healthz``."""
        if self.metrics_port is None:
            return None
        from ..observability import metrics

        registries: dict[str | None, Any] = {n: w.measured() for n, w in self.workers.items()}
        server = metrics.Server(
            metrics.registry_of(registries), self.unhealthy, self.metrics_host, self.metrics_port
        )
        self.metrics_port = server.port
        log.info("metrics on http://%s:%d/metrics", self.metrics_host, server.port)
        return server

    def _run(self, burst: bool) -> None:
        log.info("fleet %s serving databases %s", self.worker_id, ", ".join(self.workers))
        runs = {name: functools.partial(w.run, burst=burst) for name, w in self.workers.items()}
        run_each(runs, self._failed, "txqueue")

    def _failed(self, name: str, exc: BaseException) -> None:
        # The others stop as on SIGTERM, their running tasks let finish: the process exits
        # with this error, for its service manager to act on.
        log.error("the worker of database %s stopped: %s; stopping the others", name, exc)
        self.stop()
