"""Flow-control values as users write them: a rate ``"50/s"``, a concurrency ``5``; and a
task key's value as text."""

from __future__ import annotations

import json
import re
from typing import Any, Final

from ..errors import InvalidTypeError, InvalidValueError

_UNITS: Final = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
}
_RATE_RE = re.compile(r"\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*")
_NAMES: Final = {1.0: "s", 60.0: "min", 3600.0: "h", 86400.0: "day"}
MAX_LIMIT: Final = 1_000_000
MAX_PERIOD: Final = 7 * 86400.0


def parse_rate(value: object, field_name: str = "rate_limit") -> tuple[int, float]:
    """``"50/s"``, ``"600/min"``, ``"5/10s"``, ``"1000/day"``: (starts, period in seconds)."""
    if not isinstance(value, str):
        raise InvalidTypeError(field_name, f"must be a str like '50/s', not {type(value).__name__}")
    match = _RATE_RE.fullmatch(value.lower())
    unit = None if match is None else _unit(match[3])
    if match is None or unit is None:
        raise InvalidValueError(
            field_name, f"{value!r} is not a rate: write starts per period, as 50/s, 600/min, 5/10s"
        )
    starts, period = int(match[1]), float(match[2] or 1) * unit
    if not 1 <= starts <= MAX_LIMIT:
        raise InvalidValueError(field_name, f"{value!r}: the starts must be from 1 to {MAX_LIMIT}")
    if not 0 < period <= MAX_PERIOD:
        raise InvalidValueError(
            field_name, f"{value!r}: the period must be above 0 and 7 days at most"
        )
    return starts, period


def _unit(word: str) -> float | None:
    """A unit's seconds: its short name or its word, plural too (``mins``, not ``ms``)."""
    if word in _UNITS:
        return _UNITS[word]
    single = word.removesuffix("s")
    return _UNITS[single] if len(single) > 1 and single in _UNITS else None


def format_rate(starts: int, period: float) -> str:
    """A rate as ``parse_rate`` reads it: ``50/s``, ``600/min``, ``5/10s``."""
    name = _NAMES.get(period)
    return f"{starts}/{name}" if name else f"{starts}/{period:g}s"


def check_concurrency(value: object, field_name: str = "concurrency") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(field_name, f"must be an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_LIMIT:
        raise InvalidValueError(field_name, f"must be from 1 to {MAX_LIMIT}, got {value}")
    return value


def task_key(arg: str | None, default: str | None, name: str, payload: Any) -> str:
    """A task's key on argument ``arg`` (None: the task's name), as claims compute it from
    the stored arguments: ``account_id:42``, ``account_id:`` when it is not given and has
    no ``default`` (as text), ``task:<name>``."""
    if arg is None:
        return f"task:{name}"
    value = payload.get(arg) if isinstance(payload, dict) else None
    return f"{arg}:{default or '' if value is None else key_text(value)}"


def key_text(value: Any) -> str:
    """An argument's stored (JSON) value as a key's text, as PostgreSQL's ``->>`` gives it
    for a scalar: a string itself, a number or a bool its JSON."""
    return value if isinstance(value, str) else json.dumps(value)
