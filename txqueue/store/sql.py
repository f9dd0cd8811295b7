"""The SQL files: each store's named queries, and the schema's numbered migrations.

A store's statements live in ``queries.sql`` beside its code, each under a header line
``-- name: claim_ids``; comments between a header and its statement say why the statement
is as it is. A part that several statements share is written once, under ``-- part:
claim_update``, and a statement takes it in with a line ``-- with part: claim_update``.
A piece that code makes (the task row's columns, ``columns.fragments``) stands in a
statement as ``{task_columns}``, filled in when the file is read; other braces (such as
``{table}``, an identifier given at run time) are left as they are. The file is read
once, when the store is made, and a name that is not in it fails there, not at the first
call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path

from ..errors import StoreError

_NAME_RE = re.compile(r"^-- (name|part): (\w+)\s*$", re.MULTILINE)
_WITH_PART_RE = re.compile(r"^\s*-- with part: (\w+)\s*$", re.MULTILINE)
_FILL_RE = re.compile(r"\{(\w+)\}")
_MIGRATION_RE = re.compile(r"^-- migration: (\d+)\s*$", re.MULTILINE)


class Queries:
    """The named statements of one ``queries.sql``."""

    def __init__(
        self, package: str, filename: str = "queries.sql", fill: Mapping[str, str] | None = None
    ) -> None:
        text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
        pieces = _NAME_RE.split(text)
        self._by_name: dict[str, str] = {}
        shared: dict[str, str] = {}
        for kind, name, body in zip(pieces[1::3], pieces[2::3], pieces[3::3], strict=True):
            found = shared if kind == "part" else self._by_name
            if name in found:
                raise StoreError(f"{package}/{filename}: {kind} {name!r} is named twice")
            found[name] = body

        def expand(body: str, within: tuple[str, ...]) -> str:
            def include(match: re.Match[str]) -> str:
                if match[1] not in shared:
                    raise StoreError(f"{package}/{filename}: no part {match[1]!r}")
                if match[1] in within:
                    raise StoreError(f"{package}/{filename}: part {match[1]!r} takes itself in")
                return expand(shared[match[1]].strip("\n"), (*within, match[1]))

            return _WITH_PART_RE.sub(include, body)

        pieces_by_name = fill or {}

        def put(match: re.Match[str]) -> str:
            # {table} and its kin are filled per call; a declared row's piece, here or never
            # (where pieces are given: a reader of the raw statements gives none).
            if fill and match[1] not in fill and match[1].startswith(("task_", "step_")):
                raise StoreError(f"{package}/{filename}: no piece {match[1]!r} of the task row")
            return pieces_by_name.get(match[1], match[0])

        for name, body in self._by_name.items():
            self._by_name[name] = _FILL_RE.sub(put, _strip_comments(expand(body, ())))

    def __getitem__(self, name: str) -> str:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def names(self) -> list[str]:
        return sorted(self._by_name)


def _strip_comments(body: str) -> str:
    """The statement without the whole-line comments that explain it."""
    kept = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(kept).strip() + "\n"


@cache
def schema_text(filename: str) -> str:
    """A schema file: packaged inside the wheel, or at the top of a source checkout."""
    packaged = resources.files("txqueue").joinpath(filename)
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (Path(__file__).resolve().parents[2] / filename).read_text(encoding="utf-8")


def migrations(text: str) -> tuple[str, list[tuple[int, str]]]:
    """A schema file split into its preamble and its numbered migrations, in order."""
    parts = _MIGRATION_RE.split(text)
    preamble, rest = parts[0], parts[1:]
    numbered = [(int(rest[i]), rest[i + 1]) for i in range(0, len(rest), 2)]
    versions = [v for v, _ in numbered]
    if versions != sorted(set(versions)):
        raise StoreError("schema: migration numbers must be unique and increasing")
    return preamble, numbered
