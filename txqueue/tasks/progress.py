"""A running task's progress, as its handler reports it (``ctx.progress``): checked here,
kept on the task as JSON ``{"done", "total", "message", "at"}`` (``at`` in Unix seconds,
by the worker's clock), read back as ``task.Progress``."""

from __future__ import annotations

import json
import math
import numbers
import time
from datetime import UTC, datetime
from typing import Any, Final

from ..core.fields import encode_json
from ..core.stored import Progress
from ..errors import InvalidTypeError, InvalidValueError

MESSAGE_MAX: Final = 500
WRITE_EVERY: Final = 1.0
"""Seconds between a worker's writes of its tasks' progress, however often handlers report
it: a handler may call ``ctx.progress`` in a tight loop."""


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidTypeError(field, f"must be a number, not {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or number < 0:
        raise InvalidValueError(field, f"must be a finite number >= 0, got {value!r}")
    return int(number) if number.is_integer() and isinstance(value, numbers.Integral) else number


def encode(done: Any, total: Any = None, message: Any = None) -> str:
    """``ctx.progress``'s arguments checked and written as the stored JSON text, dated now."""
    done = _number(done, "done")
    if total is not None:
        total = _number(total, "total")
    if message is not None:
        if not isinstance(message, str):
            raise InvalidTypeError("message", f"must be a str, not {type(message).__name__}")
        if len(message) > MESSAGE_MAX:
            raise InvalidValueError("message", f"must be at most {MESSAGE_MAX} characters")
    doc = {"done": done, "total": total, "message": message, "at": round(time.time(), 3)}
    return encode_json(doc, "message")  # refuses what the stores cannot hold (NUL, ...)


def decode(stored: Any) -> Progress | None:
    """A stored progress (JSON text, or the dict a driver made of it) as ``task.Progress``."""
    if stored is None:
        return None
    doc = json.loads(stored) if isinstance(stored, str | bytes) else stored
    return Progress(
        doc["done"], doc.get("total"), doc.get("message"), datetime.fromtimestamp(doc["at"], UTC)
    )
