"""Configuration from flags and the environment: URLs checked once, passwords never shown."""

from __future__ import annotations

import ast
import functools
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult, parse_qs, urlsplit

from . import units
from .errors import ConfigError
from .redaction import masked, redact, slashless, unsplit

DATABASE_ENV = "TXQUEUE_DATABASE_URL"
DATABASES_ENV = "TXQUEUE_DATABASES"
DATABASE_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
AMQP_ENV = "TXQUEUE_AMQP_URL"
LISTEN_ENV = "TXQUEUE_LISTEN_URL"
MAX_JSON_ENV = "TXQUEUE_MAX_JSON_BYTES"
DEFAULT_MAX_JSON = 1 << 20
QUEUE_TYPE_ENV = "TXQUEUE_AMQP_QUEUE_TYPE"
QUEUE_TYPES = ("classic", "quorum")
DEFAULT_DATABASE_URL = "sqlite:///txqueue.db"
VACUUM_HORIZON_ENV = "TXQUEUE_VACUUM_HORIZON_WARN"
DEFAULT_VACUUM_HORIZON_WARN = 300.0


def hosts(url: str) -> list[str]:
    """The ``host:port`` entries of a URL's authority: one, or, as libpq takes them for a
    primary and its standbys and txqueue for a RabbitMQ cluster's nodes, several separated
    by commas (``postgresql://u@db1:5432,db2:5432/app``)."""
    return urlsplit(url).netloc.rpartition("@")[2].split(",")


def _check_hosts(url: str, what: str) -> list[SplitResult]:
    """Every host entry of the URL, parsed; ConfigError if one has a malformed port."""
    entries = [urlsplit(f"//{entry}") for entry in hosts(url)]
    try:
        for entry in entries:
            entry.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise ConfigError(f"malformed {what} URL {redact(url)!r}") from None
    return entries


def database_target(flag: str | None = None) -> tuple[str, str | None]:
    """The database to use and its name: from the flag or TXQUEUE_DATABASE_URL, a URL
    (``database_url``'s) or the name of one of TXQUEUE_DATABASES (``databases``); unset,
    SQLite's ``txqueue.db``, unless TXQUEUE_DATABASES names several to choose from."""
    given = flag or os.environ.get(DATABASE_ENV)
    named = databases() if os.environ.get(DATABASES_ENV, "").strip() else {}
    if given and DATABASE_NAME.fullmatch(given):
        if given not in named:
            listed = ", ".join(named) or "none"
            raise ConfigError(f"database {given!r} is not one of {DATABASES_ENV}'s ({listed})")
        return named[given], given
    if not given and named:
        raise ConfigError(
            f"{DATABASES_ENV} names several databases: name the one to use (--database-url "
            "NAME), or give its URL"
        )
    url = _checked_url(given or DEFAULT_DATABASE_URL)
    return url, name_of(url, named)


def name_of(url: str, named: Mapping[str, str]) -> str | None:
    """The name ``url`` has among ``named``, if any: given by its URL, a named database is
    still that name's (its wake-ups' queues)."""
    return next((name for name, each in named.items() if each == url), None)


def database_url(flag: str | None = None) -> str:
    """The database URL to use, from the flag or TXQUEUE_DATABASE_URL (``database_target``),
    in txqueue's form: ``postgresql://...`` or ``sqlite:///path``."""
    return database_target(flag)[0]


def _checked_url(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ConfigError(f"malformed database URL {redact(url)!r}") from None
    _check_hosts(url, "database")
    # SQLAlchemy names the driver after a "+" (postgresql+asyncpg://): an application's
    # own URL is accepted as it is, and txqueue's connections use its own driver.
    scheme = parts.scheme.lower().split("+", 1)[0]
    if scheme in ("postgresql", "postgres"):
        if not url[len(parts.scheme) + 1 :].startswith("//"):
            # urlsplit would read "postgres:/h/db" as a local socket and a database "h/db".
            raise ConfigError(
                f"malformed database URL {slashless(url)!r}: expected "
                "postgresql://user@host:port/db (or postgresql:///db for a local socket)"
            )
        parts = parts._replace(scheme="postgresql")
    elif scheme == "sqlite":
        file = url.split(":///", 1)[1] if ":///" in url else ""
        if parts.netloc or not file or file == ":memory:" or parts.query:
            raise ConfigError(
                f"SQLite URL must name a file, as sqlite:///relative.db or "
                f"sqlite:////absolute/path.db: {url!r}"
            )
        return "sqlite:///" + file
    else:
        raise ConfigError(
            f"unsupported database URL scheme {parts.scheme!r}: use postgresql:// or sqlite:///"
        )
    return unsplit(parts)


def databases(given: Mapping[str, str] | Sequence[str] | None = None) -> dict[str, str]:
    """Named PostgreSQL databases that one fleet of workers serves: ``given`` (a mapping of
    name to URL, or ``name=url`` entries), else TXQUEUE_DATABASES (``name=url`` entries
    separated by spaces); {} when neither names any. A name is lower-case letters, digits
    and ``_``, a letter first, at most 40 characters; each URL is checked as
    ``database_url``'s and serves one name."""
    if given is None:
        given = os.environ.get(DATABASES_ENV, "").split()
    entries = list(given.items()) if isinstance(given, Mapping) else _entries(given)
    named: dict[str, str] = {}
    for name, url in entries:
        check_database_name(name, "databases")
        if name in named:
            raise ConfigError(f"databases: {name!r} is named twice")
        try:
            checked = _checked_url(url) if isinstance(url, str) and url else ""
        except ConfigError as exc:
            raise ConfigError(f"databases: {name!r}: {exc}") from None
        if not checked.startswith("postgresql:"):
            raise ConfigError(f"databases: {name!r} needs a postgresql:// URL")
        twin = next((other for other, u in named.items() if u == checked), None)
        if twin is not None:
            raise ConfigError(f"databases: {name!r} and {twin!r} have the same URL")
        named[name] = checked
    return named


def check_database_name(name: object, field: str) -> str:
    """A database's name: lower-case letters, digits and ``_``, a letter first, at most 40."""
    if not isinstance(name, str) or not DATABASE_NAME.fullmatch(name):
        shown = masked(name) if isinstance(name, str) else repr(name)
        raise ConfigError(
            f"{field}: name {shown} must be lower-case letters, digits and _, a letter first, "
            "at most 40 characters"
        )
    return name


def database_name(name: str | None, url: str) -> str | None:
    """A worker's or cleaner's ``database`` setting, checked: a name, of a PostgreSQL URL."""
    if name is None:
        return None
    check_database_name(name, "database")
    if not url.startswith("postgresql:"):
        raise ConfigError("database: a named database is a PostgreSQL one")
    return name


def named_as(held: str | None, name: str | None) -> None:
    """Refuse a database whose recorded name (``txqueue init``'s) is not ``name``: its
    wake-ups go to the queues of the name it holds (None: of none)."""
    if held == name:
        return
    if name is None:
        raise ConfigError(
            f"database: it is named {held!r} (txqueue init): give that name (--database-url "
            f"{held}, with {DATABASES_ENV}) so that its wake-ups reach this process"
        )
    state = "not named" if held is None else f"named {held!r}"
    raise ConfigError(
        f"databases: {name!r} is {state} in its txqueue_database table: run `txqueue init` "
        "with the databases named, or check its URL"
    )


def _entries(given: Sequence[str]) -> list[tuple[str, str]]:
    """``name=url`` entries split, refusing one without its ``=``."""
    out = []
    for entry in given:
        name, sep, url = entry.partition("=")
        if not sep:
            raise ConfigError(f"databases: {masked(entry)} must be name=postgresql://...")
        out.append((name, url))
    return out


def listen_url(flag: str | None = None) -> str | None:
    """A URL of its own for a worker to listen for NOTIFY wake-ups on, from the flag or
    TXQUEUE_LISTEN_URL: a direct one, where the database URL goes through a transaction
    pooler (which cannot carry LISTEN). None: the database URL's."""
    url = flag or os.environ.get(LISTEN_ENV) or None
    if url is None:
        return None
    checked = _checked_url(url)
    if not checked.startswith("postgresql:"):
        raise ConfigError(f"listen URL must be a PostgreSQL one, got {redact(url)!r}")
    return checked


def amqp_url(flag: str | None = None) -> str | None:
    """The RabbitMQ URL, from the flag or TXQUEUE_AMQP_URL; None means no broker, poll only.
    A cluster's nodes are listed in one URL, ``amqp://user:pass@node1:5672,node2:5672/``
    (``amqp_nodes``)."""
    url = flag or os.environ.get(AMQP_ENV) or None
    if url is None:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ConfigError(f"malformed AMQP URL {redact(url)!r}") from None
    entries = _check_hosts(url, "AMQP")
    if parts.scheme not in ("amqp", "amqps") or not all(entry.hostname for entry in entries):
        raise ConfigError(f"AMQP URL must look like amqp://user:pass@host:5672/: {redact(url)!r}")
    query = parse_qs(parts.query)
    for given in query.get("heartbeat", []):
        if not given.isdigit():
            raise ConfigError(
                f"AMQP URL's heartbeat must be a whole number of seconds (0: none); "
                f"got {given!r} in {redact(url)!r}"
            )
    for given in query.get("ssl_options", []):
        try:
            options = ast.literal_eval(given)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            options = None
        if not isinstance(options, dict):  # pika takes no other
            raise ConfigError(
                "AMQP URL's ssl_options must be a Python dict, as "
                f"amqps://host/?ssl_options={{'cafile':'/path/ca.pem'}}: {redact(url)!r}"
            )
    return url


def amqp_nodes(url: str) -> list[str]:
    """One URL per RabbitMQ node of a checked ``amqp_url``: its user, password, virtual host
    and options, which a cluster's nodes share, with each host in turn."""
    parts = urlsplit(url)
    user, at, _ = parts.netloc.rpartition("@")
    return [unsplit(parts._replace(netloc=f"{user}{at}{entry}")) for entry in hosts(url)]


def queue_type(value: str | None = None) -> str:
    """The type of the RabbitMQ queues txqueue declares, ``value`` or else
    TXQUEUE_AMQP_QUEUE_TYPE: ``classic`` (durable; the default) or ``quorum`` (replicated)."""
    if value is None:
        field, given = QUEUE_TYPE_ENV, os.environ.get(QUEUE_TYPE_ENV, "")
    else:
        field, given = "queue_type", value
    kind = given.strip().lower() if isinstance(given, str) else given
    if value is None and not kind:
        kind = QUEUE_TYPES[0]
    if kind not in QUEUE_TYPES:
        raise ConfigError(f"{field} must be one of {', '.join(QUEUE_TYPES)}; got {given!r}")
    return str(kind)


FROM_ENV: Any = object()
"""The default of an ``amqp_url`` parameter: TXQUEUE_AMQP_URL (None there means no broker)."""


def broker_url(url: str | None = FROM_ENV) -> str | None:
    """An ``amqp_url`` parameter's URL: FROM_ENV reads TXQUEUE_AMQP_URL; None or "" means no
    broker, whatever the environment says."""
    return amqp_url() if url is FROM_ENV else (amqp_url(url) if url else None)


def broker(url: str | None = FROM_ENV, kind: str | None = None) -> tuple[str | None, str]:
    """The broker URL (``broker_url``) and its queue type, as a worker, a cleaner or an App
    takes them: ``kind`` None reads TXQUEUE_AMQP_QUEUE_TYPE, but only with a broker, where
    it matters. Checked here, so a bad value fails at construction, not later on another
    thread."""
    resolved = broker_url(url)
    if kind is None and resolved is None:
        return None, QUEUE_TYPES[0]
    return resolved, queue_type(kind)


def vacuum_horizon_warn(value: float | None = None) -> float:
    """Seconds the vacuum horizon may be held back before txqueue warns: ``value``, else
    TXQUEUE_VACUUM_HORIZON_WARN (``300``, ``5m``, ...), else five minutes; 0 never warns."""
    if value is not None:
        return units.duration(value, "vacuum_horizon_warn")
    given = os.environ.get(VACUUM_HORIZON_ENV, "").strip()
    return units.duration(given, VACUUM_HORIZON_ENV) if given else DEFAULT_VACUUM_HORIZON_WARN


@functools.cache
def max_json_bytes() -> int:
    """The largest payload or result, in bytes of JSON: TXQUEUE_MAX_JSON_BYTES, read once
    per process, else 1 MiB. A row that large is already a slow one to claim and log."""
    text = os.environ.get(MAX_JSON_ENV)
    if not text:
        return DEFAULT_MAX_JSON
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if limit < 1024:
        raise ConfigError(f"{MAX_JSON_ENV} must be a number of bytes, at least 1024: {text!r}")
    return limit


def metrics_address(port: int | None, host: str) -> tuple[int | None, str]:
    """A worker's metrics_port and metrics_host, checked."""
    if port is not None and (isinstance(port, bool) or not isinstance(port, int)):
        raise ConfigError(f"metrics_port must be an int, got {port!r}")
    if port is not None and not 0 <= port <= 65535:
        raise ConfigError(f"metrics_port must be 0 to 65535, got {port}")
    if not isinstance(host, str) or not host:
        raise ConfigError(f"metrics_host must be a host name or address, got {host!r}")
    return port, host
