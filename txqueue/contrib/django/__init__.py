"""txqueue in a Django project (``pip install 'txqueue[django]'``).

Add ``"txqueue.contrib.django"`` to ``INSTALLED_APPS``: ``manage.py migrate`` creates
txqueue's tables (the same numbered migrations as ``txqueue init``, recorded in the same
table, so either may run first), and ``manage.py txqueue worker|cleaner|status …`` is the
CLI with the database taken from ``DATABASES`` and Django set up for the handlers. The
broker is ``settings.TXQUEUE_AMQP_URL``, for the enqueues of every process Django runs and
for ``manage.py txqueue``; the environment's TXQUEUE_AMQP_URL, when set, wins.
Register handlers on ``txqueue.contrib.django.Registry`` so that each task starts and ends
with Django's stale connections closed, as Django expects of a long-running process.

In a ``TestCase``, pass Django's ``connection`` to ``txqueue.testing.captured`` and
``run_tasks``: they read and run in the test's transaction.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any
from urllib.parse import quote, urlencode

try:
    from django.conf import settings
    from django.db import close_old_connections, connections
except ImportError:  # pragma: no cover - the extra is missing
    raise ImportError(
        "txqueue.contrib.django needs Django: pip install 'txqueue[django]'"
    ) from None

import txqueue
from txqueue import config
from txqueue.store import POSTGRES, SQLITE
from txqueue.store.protocols import AnyStore
from txqueue.tasks.definition import Handler
from txqueue.testing.inline import running_inline

from ...errors import ConfigError

AMQP_SETTING = "TXQUEUE_AMQP_URL"


def database_url(alias: str = "default") -> str:
    """txqueue's URL for the database Django calls ``alias``."""
    settings = connections[alias].settings_dict
    engine = settings["ENGINE"].rsplit(".", 1)[-1]
    if engine == "sqlite3":
        return f"sqlite:///{settings['NAME']}"
    if engine != "postgresql":
        raise ConfigError(
            f"DATABASES[{alias!r}]: txqueue runs on PostgreSQL or SQLite, not {engine}"
        )
    user = quote(settings.get("USER") or "", safe="")
    password = quote(settings.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    # libpq options (sslmode, …) carry over; a socket directory goes as the host parameter.
    query = {k: str(v) for k, v in (settings.get("OPTIONS") or {}).items() if type(v) in (str, int)}
    host = settings.get("HOST") or ""
    if host.startswith("/"):
        query["host"], host = host, ""
    port = f":{settings['PORT']}" if settings.get("PORT") else ""
    name = quote(str(settings["NAME"]), safe="")
    return f"postgresql://{auth}{host}{port}/{name}" + (f"?{urlencode(query)}" if query else "")


def amqp_url() -> str | None:
    """The broker URL in ``settings.TXQUEUE_AMQP_URL``; None when the setting is unset or
    empty (no broker: workers poll)."""
    url = getattr(settings, AMQP_SETTING, None)
    if url is not None and not isinstance(url, str):
        raise ConfigError(f"settings.{AMQP_SETTING} must be a str, not {type(url).__name__}")
    return url or None


def configure_broker() -> None:
    """Send this process's wake-ups to ``settings.TXQUEUE_AMQP_URL`` (``txqueue.configure``)
    unless TXQUEUE_AMQP_URL is in the environment, which wins, as it does over
    ``DATABASES`` for the database. Called when Django starts (the app's ``ready``)."""
    url = amqp_url()
    if url is None or config.AMQP_ENV in os.environ:
        return
    try:
        txqueue.configure(amqp_url=url)
    except ConfigError as exc:
        raise ConfigError(f"settings.{AMQP_SETTING}: {exc}") from None


def apply_schema(connection: Any) -> list[int]:
    """Apply txqueue's migrations not yet recorded, on Django's ``connection`` and in its
    transaction (the migration's)."""
    connection.ensure_connection()
    stores: dict[str, AnyStore] = {"postgresql": POSTGRES, "sqlite": SQLITE}
    store = stores.get(connection.vendor)
    if store is None:
        raise ConfigError(f"txqueue runs on PostgreSQL or SQLite, not {connection.vendor}")
    return store.apply_schema(connection.connection)


def migrate(apps: Any, schema_editor: Any) -> None:
    """The operation of txqueue's Django migrations: ``apply_schema`` on theirs."""
    apply_schema(schema_editor.connection)


class Registry(txqueue.Registry):
    """A ``txqueue.Registry`` whose handlers start and end with Django's stale database
    connections closed (``close_old_connections``), as requests do; not when
    ``txqueue.testing.run_tasks`` runs them, on a test's connections."""

    def around(self, fn: Handler) -> Handler:
        if inspect.iscoroutinefunction(fn):
            return fn  # the ORM is sync: async handlers manage their own

        @functools.wraps(fn)
        def handler(*args: Any, **kwargs: Any) -> Any:
            if running_inline():  # a test's connection, maybe in its TestCase's transaction
                return fn(*args, **kwargs)
            close_old_connections()
            try:
                return fn(*args, **kwargs)
            finally:
                close_old_connections()

        return handler
