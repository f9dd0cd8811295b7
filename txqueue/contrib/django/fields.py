"""Model fields for txqueue's tables as each store keeps them: on PostgreSQL, ``uuid`` and
``timestamptz``; on SQLite, ids as dashed text and times as Unix seconds (REAL), which
Django's own UUIDField (32 hex digits there) and DateTimeField (ISO text) would misread."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from django.db import models


class TaskIdField(models.UUIDField):
    """A task's or a workflow's id."""

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if connection.vendor != "sqlite":
            return super().get_db_prep_value(value, connection, prepared)
        value = value if prepared else self.get_prep_value(value)
        if value is None:
            return None
        return str(value if isinstance(value, uuid.UUID) else self.to_python(value))


class UnixTimeField(models.DateTimeField):
    """A moment, always aware (UTC)."""

    def get_internal_type(self) -> str:
        # Not "DateTimeField": Django's SQLite backend would parse the stored number as
        # ISO text. PostgreSQL's driver gives datetimes either way.
        return "FloatField"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> datetime | None:
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC)
        return value  # type: ignore[no-any-return]

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        value = value if prepared else self.get_prep_value(value)
        if value is None or connection.vendor != "sqlite":
            return value
        return value.timestamp()
