"""The named statements of a queries.sql: parts written once and taken in by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from txqueue.errors import StoreError
from txqueue.store.sql import Queries


def test_a_part_is_written_once_and_taken_in_where_a_statement_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "somestore"
    package.mkdir()
    (package / "__init__.py").write_text("")
    sql = package / "queries.sql"
    sql.write_text(
        "-- part: columns\n-- why these\nid, name\n\n"
        "-- name: one\n-- why one\nSELECT\n    -- with part: columns\nFROM t\n\n"
        "-- name: two\nSELECT 2\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    queries = Queries("somestore")
    assert queries["one"] == "SELECT\nid, name\nFROM t\n"
    assert queries.names() == ["one", "two"]
    sql.write_text("-- name: one\nSELECT\n-- with part: nowhere\n")
    with pytest.raises(StoreError, match="no part 'nowhere'"):
        Queries("somestore")
    sql.write_text("-- part: p\n1\n-- part: p\n2\n")
    with pytest.raises(StoreError, match="part 'p' is named twice"):
        Queries("somestore")
    sql.write_text(
        "-- part: a\n-- with part: b\n-- part: b\n-- with part: a\n-- name: x\n-- with part: a\n"
    )
    with pytest.raises(StoreError, match="part 'a' takes itself in"):
        Queries("somestore")
