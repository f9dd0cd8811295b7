"""The dashboard's first page when it serves several databases: each one's tasks by
state, read side by side, so that one out of reach is said on its row and holds up none
of the others."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .. import config
from ..core.sidebyside import SideBySide
from ..errors import StoreError
from ..store.reports import CountRow
from .pages import COUNT_CAP, REFRESH, Pages
from .shown import capped, totals

READ_WAIT = 5.0
"""Seconds the page waits for each database's counts."""


class Index:
    def __init__(self, pages: Mapping[str, Pages[Any]]) -> None:
        self.pages = dict(pages)
        self._side = SideBySide[list[CountRow]](self.pages, "txqueue-dashboard")

    def overview(self, request: Request) -> Response:
        found = self._side.read({n: _counts(p) for n, p in self.pages.items()}, READ_WAIT)
        rows: list[dict[str, Any]] = []
        for name, counts in found.items():
            if isinstance(counts, (StoreError, TimeoutError)):
                rows.append(
                    {"name": name, "error": config.scrub(str(counts), self.pages[name].url)}
                )
            elif isinstance(counts, Exception):
                raise counts
            else:
                rows.append({"name": name, **totals(counts), "capped": capped(counts, COUNT_CAP)})
        first = next(iter(self.pages.values()))
        return first.render(
            request, "databases.html", database=None, rows=rows, wait=READ_WAIT, refresh=REFRESH
        )


def _counts(pages: Pages[Any]) -> Callable[[], list[CountRow]]:
    def read() -> list[CountRow]:
        with pages.connect() as conn:
            return pages.store.queue_counts(conn, COUNT_CAP)

    return read
