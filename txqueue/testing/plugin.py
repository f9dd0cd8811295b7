"""txqueue's pytest plugin, registered by installing txqueue (entry point ``pytest11``).

Fixtures, each fresh for every test and gone after it:

- ``txqueue_sqlite``: the URL of a SQLite file with txqueue's tables;
- ``txqueue_postgres``: the URL of a scratch PostgreSQL database with txqueue's tables,
  made on the server named by TXQUEUE_TEST_DATABASE_URL (or the ini option
  ``txqueue_postgres_url``) and dropped after the test;
- ``txqueue_clock``: the ``Clock`` of the test's database (``txqueue_postgres`` if the
  test uses it, else ``txqueue_sqlite``), back to the real time after the test.

It also registers the marker ``unsupported`` of the store conformance suite
(``txqueue.testing.conformance``), whose own fixtures a test suite loads by name.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ..config import database_url
from ..errors import TxQueueError
from ..redaction import redact, unsplit
from ..store import POSTGRES, SQLITE
from ..store.postgres.databases import create_database, drop_database
from .clock import Clock

SERVER_ENV = "TXQUEUE_TEST_DATABASE_URL"
SERVER_INI = "txqueue_postgres_url"


def pytest_configure(config: pytest.Config) -> None:
    # The store conformance suite's marker, known before a test module imports the suite.
    config.addinivalue_line(
        "markers", "unsupported(**stores): stores that cannot offer this behaviour, and why"
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        SERVER_INI,
        f"PostgreSQL server on which txqueue_postgres makes its scratch databases "
        f"(a postgresql:// URL; {SERVER_ENV} wins)",
    )


@pytest.fixture
def txqueue_sqlite(tmp_path: Path) -> str:
    """A SQLite database file of this test's own, with txqueue's tables: its URL."""
    url = f"sqlite:///{tmp_path / 'txqueue.db'}"
    with closing(SQLITE.connect(url, create=True)) as conn:
        SQLITE.apply_schema(conn)
    return url


@pytest.fixture
def txqueue_postgres(request: pytest.FixtureRequest) -> Iterator[str]:
    """A PostgreSQL database of this test's own, with txqueue's tables and a clock the
    test can move (``txqueue_clock``): its URL. Dropped after the test."""
    server = os.environ.get(SERVER_ENV) or str(request.config.getini(SERVER_INI) or "")
    if not server:
        pytest.fail(
            f"txqueue_postgres needs a PostgreSQL server: set {SERVER_ENV} "
            f"(e.g. postgresql://postgres@127.0.0.1:5432/postgres) or the ini option "
            f"{SERVER_INI}",
            pytrace=False,
        )
    try:
        server = database_url(server)
        name = f"txqueue_test_{uuid.uuid4().hex[:12]}"
        create_database(server, name)
    except TxQueueError as exc:
        pytest.fail(f"txqueue_postgres: {redact(server)}: {exc}", pytrace=False)
    url = unsplit(urlsplit(server)._replace(path="/" + name))
    try:
        with closing(POSTGRES.connect(url)) as conn:
            POSTGRES.apply_schema(conn)
            POSTGRES.install_clock(conn)
        yield url
    finally:
        drop_database(server, name)


@pytest.fixture
def txqueue_clock(request: pytest.FixtureRequest) -> Iterator[Clock]:
    """The clock of this test's database, to move forward with ``advance``."""
    on = "txqueue_postgres" if "txqueue_postgres" in request.fixturenames else "txqueue_sqlite"
    clock = Clock(str(request.getfixturevalue(on)))
    yield clock
    clock.reset()
