"""The fresh databases without txqueue's tables that txqueue's own store kinds name
(``tests/store/kinds.py``); the rest of the suite's fixtures are shipped
(``txqueue.testing.conformance.plugin``, loaded by tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import store_kinds
from tests.store.kinds import KINDS, POSTGRES_18, other_database
from txqueue.store import SQLITE
from txqueue.testing.conformance.suite.connection import bare  # noqa: F401 (a fixture)

# The store and contract suites run on PostgreSQL 18 too: the other supported version.
store_kind = store_kinds(*KINDS, POSTGRES_18)


@pytest.fixture
def pg_empty_url(services: tuple[str, str]) -> Iterator[str]:
    """A fresh PostgreSQL database without txqueue's tables, dropped afterwards."""
    yield from _empty(services[0])


@pytest.fixture
def pg18_empty_url(pg18: str) -> Iterator[str]:
    yield from _empty(pg18)


def _empty(admin: str) -> Iterator[str]:
    name = f"txqueue_bare_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    try:
        yield other_database(admin, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def sqlite_empty_url(tmp_path: Path) -> str:
    """A fresh SQLite database file without txqueue's tables."""
    url = f"sqlite:///{tmp_path / 'bare.db'}"
    SQLITE.connect(url, create=True).close()
    return url
