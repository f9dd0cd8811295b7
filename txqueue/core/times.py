"""Times as txqueue prints them for people and scripts: ISO 8601 in UTC, whatever zone the
database session returned them in (PostgreSQL's ``TimeZone`` setting, or ``PGTZ``)."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(value: datetime) -> str:
    """``value`` in UTC, ISO 8601 (``2026-11-28T09:00:00.123456+00:00``). A naive time
    is taken as UTC: txqueue writes none in any other zone."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC).isoformat()
    return value.astimezone(UTC).isoformat()


def iso_or_none(value: datetime | None) -> str | None:
    return None if value is None else iso(value)


def instant(value: str | float) -> datetime:
    """A time as txqueue keeps it in JSON: Unix seconds (a history's entries), or ISO 8601."""
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    return datetime.fromisoformat(value)
