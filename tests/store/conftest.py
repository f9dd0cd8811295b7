"""The fresh databases without txqueue's tables that txqueue's own store kinds name
(``tests/store/kinds.py``); the rest of the suite's fixtures are shipped
(``txqueue.testing.conformance.plugin``, loaded by tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.store.kinds import other_database
from txqueue.store import SQLITE
from txqueue.testing.conformance.suite.connection import bare  # noqa: F401 (a fixture)


@pytest.fixture
def pg_empty_url(services: tuple[str, str]) -> Iterator[str]:
    """A fresh PostgreSQL database without txqueue's tables, dropped afterwards."""
    admin = services[0]
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
