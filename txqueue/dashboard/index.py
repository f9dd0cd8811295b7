"""The dashboard's first page when it serves several databases: each one's tasks by
state, read side by side, so that one out of reach is said on its row and holds up none
of the others."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .. import redaction
from ..core.sidebyside import SideBySide
from ..errors import StoreError
from ..store.reports import CountRow
from .pages import COUNT_CAP, REFRESH, Pages
from .shown import capped, totals

log = logging.getLogger("txqueue.dashboard")

READ_WAIT = 5.0
"""Seconds the page waits for each database's counts."""


class Index:
    """The first page of a dashboard of several databases (``pages``, each one's)."""

    def __init__(self, pages: Mapping[str, Pages[Any]]) -> None:
        self.pages = dict(pages)
        self._side = SideBySide[list[CountRow]]("txqueue-dashboard")

    def overview(self, request: Request) -> Response:
        found = self._side.read({n: _counts(p) for n, p in self.pages.items()}, READ_WAIT)
        rows: list[dict[str, Any]] = []
        for name, counts in found.items():
            if isinstance(counts, Exception):
                rows.append({"name": name, "error": self._said(name, counts)})
            else:
                rows.append({"name": name, **totals(counts), "capped": capped(counts, COUNT_CAP)})
        first = next(iter(self.pages.values()))
        return first.render(
            request, "databases.html", database=None, rows=rows, wait=READ_WAIT, refresh=REFRESH
        )

    def _said(self, name: str, exc: Exception) -> str:
        """What kept a database's row empty: an outage as the store says it, anything else
        (a defect) with its type, logged whole; neither hides the other rows."""
        said = str(exc)
        if not isinstance(exc, (StoreError, TimeoutError)):
            log.error("dashboard: reading database %s failed", name, exc_info=exc)
            said = f"{type(exc).__name__}: {exc}"
        return redaction.scrub(said, self.pages[name].url)


def _counts(pages: Pages[Any]) -> Callable[[], list[CountRow]]:
    def read() -> list[CountRow]:
        with pages.connect() as conn:
            return pages.store.queue_counts(conn, COUNT_CAP)

    return read
