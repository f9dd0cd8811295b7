"""Tables that stay readable: plain aligned columns with every value in full when stdout
is not a terminal (a pipe, a file, a pager), and at any terminal width a table that
folds a long value onto the next line instead of cutting it to ``pend…``; a page of a
listing, as such a table or as JSON."""

from __future__ import annotations

import getpass
import json
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

from rich import box
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text


def print_table(
    console: Console,
    headers: Sequence[str] | None,
    rows: Sequence[Sequence[str]],
    *,
    whole: Sequence[int] = (),
) -> None:
    """``headers`` None: a key/value listing without a heading row. ``whole``: the
    columns never folded (ids, states, counts), given their full width first."""
    if not console.is_terminal:
        lines = [[_one_line(c) for c in row] for row in [*([headers] if headers else []), *rows]]
        widths = (
            [max(len(line[i]) for line in lines) for i in range(len(lines[0]))] if lines else []
        )
        for line in lines:
            text = "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
            console.print(text.rstrip(), markup=False, highlight=False, soft_wrap=True)
        return
    if headers is None:
        table = Table.grid(Column(no_wrap=True), Column(overflow="fold"), padding=(0, 2))
    else:
        columns = [
            Column(h, no_wrap=True, min_width=max(len(r[i]) for r in rows))
            if i in whole and rows
            else Column(h, overflow="fold")
            for i, h in enumerate(headers)
        ]
        table = Table(*columns, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)


_held: ContextVar[list[Mapping[str, Any]] | None] = ContextVar("txqueue_json", default=None)


def print_json(console: Console, doc: Mapping[str, Any]) -> None:
    """A ``--json`` output: always one object (docs/reference/cli.md, JSON output), whose
    shape txqueue/cli/json_shapes.py gives; inside ``holding``, kept instead."""
    held = _held.get()
    if held is not None:
        held.append(doc)
        return
    console.print_json(json.dumps(doc))


@contextmanager
def holding() -> Iterator[list[Mapping[str, Any]]]:
    """The ``--json`` outputs of the block, kept rather than printed: each database's, of
    a command run on several, to print as one object."""
    held: list[Mapping[str, Any]] = []
    token = _held.set(held)
    try:
        yield held
    finally:
        _held.reset(token)


def _one_line(cell: str) -> str:
    return cell.replace("\r", "\\r").replace("\n", "\\n")


class _Listed(Protocol):
    @property
    def id(self) -> uuid.UUID: ...


L = TypeVar("L", bound=_Listed)


def print_page(
    console: Console,
    what: str,
    page: Sequence[L],
    limit: int,
    as_json: Callable[[L], dict[str, Any]] | None,
    table: Callable[[Sequence[L]], None],
) -> None:
    """A page of a listing, newest first, and where the next one starts (below the last
    of a full page): ``{what: [as_json(each)], "next_before": id or null}``, or without
    ``as_json`` the ``table`` of it, or ``no WHAT match``."""
    more = str(page[-1].id) if len(page) == limit else None
    if as_json is not None:
        print_json(console, {what: [as_json(x) for x in page], "next_before": more})
        return
    if not page:
        console.print(f"no {what} match")
        return
    table(page)
    if more:
        console.print(f"more: --before {more}", highlight=False)


SHOWN = 2000
"""Characters of a payload or result `show` prints unless told --full."""


def cut(text: str, limit: int, hint: str = "") -> str:
    """``text``, or its first ``limit`` characters and how many more there are."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters{hint})"


def _operator() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):  # no user name in the environment or the password file
        return "cli"


OPERATOR = _operator()
"""Who asked, as the task's history says of a retry or cancel from the command line."""
