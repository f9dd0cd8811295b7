"""Scratch databases for tests (the pytest plugin's ``txqueue_postgres``)."""

from __future__ import annotations

import re

import psycopg
from psycopg import sql

from ...errors import InvalidValueError
from .connection import errors

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def create_database(server_url: str, name: str) -> None:
    """Create the empty database ``name`` on the server of ``server_url``."""
    with errors("create a database"), psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(_checked(name))))


def drop_database(server_url: str, name: str) -> None:
    """Drop ``name``, ending its sessions first (PostgreSQL 13 or later)."""
    with errors("drop a database"), psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(_checked(name))
            )
        )


def _checked(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise InvalidValueError("name", f"must be a plain database name, got {name!r}")
    return name
