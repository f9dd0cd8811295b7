"""Times on the command line, for the options that take one: an ISO 8601 time, or a
time ago (``7d``), read as an aware datetime."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from ..errors import InvalidValueError

When = "an ISO 8601 time (2026-11-28T09:00Z), or a time ago: 90s, 30m, 2h, 7d"
CreatedAfter = Annotated[
    str | None, typer.Option(help=f"Created at or after {When}.", show_default=False)
]
CreatedBefore = Annotated[
    str | None, typer.Option(help=f"Created before {When}.", show_default=False)
]
FinishedAfter = Annotated[
    str | None, typer.Option(help=f"Finished at or after {When}.", show_default=False)
]
FinishedBefore = Annotated[
    str | None, typer.Option(help=f"Finished before {When}.", show_default=False)
]

_AGO = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def when(option: str, text: str | None) -> datetime | None:
    """The time ``text`` gives (None: none); InvalidValueError naming ``option`` if it
    gives none. A time without a zone is UTC."""
    if text is None:
        return None
    ago = _AGO.fullmatch(text.strip())
    if ago:
        try:
            return datetime.now(UTC) - timedelta(seconds=float(ago[1]) * _UNITS[ago[2]])
        except OverflowError:
            raise InvalidValueError(option, f"{text!r} goes back before year 1") from None
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidValueError(option, f"must be {When}; got {text!r}") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
