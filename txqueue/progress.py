"""A running task's progress, as its handler reports it (``ctx.progress``): checked here,
kept on the task as JSON ``{"done", "total", "message", "at"}``, read back as ``Progress``."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from .errors import InvalidTypeError, InvalidValueError
from .task import encode_json

MESSAGE_MAX: Final = 500
WRITE_EVERY: Final = 1.0
"""Seconds between a worker's writes of its tasks' progress, however often handlers report
it: a handler may call ``ctx.progress`` in a tight loop."""


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a task's handler said it was: ``done`` of ``total`` (None: unknown), with an
    optional ``message``, reported ``at``."""

    done: float
    total: float | None
    message: str | None
    at: datetime

    @property
    def fraction(self) -> float | None:
        """``done / total`` (at most 1), or None without a total."""
        return None if self.total is None else min(1.0, self.done / self.total)

    def describe(self) -> str:
        """``3/10 (30%): copying``, ``3``, or ``3: copying``."""
        done = _shown(self.done)
        if self.fraction is not None and self.total is not None:
            done = f"{done}/{_shown(self.total)} ({self.fraction:.0%})"
        return done if self.message is None else f"{done}: {self.message}"

    def as_json(self) -> dict[str, Any]:
        return {
            "done": self.done,
            "total": self.total,
            "message": self.message,
            "at": self.at.isoformat(),
        }


def _shown(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTypeError(field, f"must be a number, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise InvalidValueError(field, f"must be a finite number >= 0, got {value!r}")
    return value


def encode(done: Any, total: Any = None, message: Any = None) -> str:
    """``ctx.progress``'s arguments checked and written as the stored JSON text, dated now."""
    done = _number(done, "done")
    if total is not None:
        total = _number(total, "total")
        if total == 0:
            raise InvalidValueError("total", "must be more than 0 (or None: unknown)")
        if done > total:
            raise InvalidValueError("done", f"must be at most total ({total!r}), got {done!r}")
    if message is not None:
        if not isinstance(message, str):
            raise InvalidTypeError("message", f"must be a str, not {type(message).__name__}")
        if len(message) > MESSAGE_MAX:
            raise InvalidValueError("message", f"must be at most {MESSAGE_MAX} characters")
    doc = {"done": done, "total": total, "message": message, "at": round(time.time(), 3)}
    return encode_json(doc, "message")  # refuses what the stores cannot hold (NUL, ...)


def decode(stored: Any) -> Progress | None:
    """A stored progress (JSON text, or the dict a driver made of it) as ``Progress``."""
    if stored is None:
        return None
    doc = json.loads(stored) if isinstance(stored, str | bytes) else stored
    return Progress(
        doc["done"], doc.get("total"), doc.get("message"), datetime.fromtimestamp(doc["at"], UTC)
    )
