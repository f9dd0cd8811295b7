"""The checks of the values txqueue takes (names, queues, timeouts, deadlines, JSON), each
raising a ValidationError that names the field: shared by tasks, registries, schedules,
queue settings and filters."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from .. import config
from ..errors import InvalidTypeError, InvalidValueError

MAX_TIMEOUT: Final = 30 * 86400.0
"""The longest lease one claim takes (a task heartbeats to extend it): one far beyond would
not fit the database's time arithmetic when claimed."""
MIN_TIMEOUT: Final = 1.0
"""The shortest lease: a worker extends each lease every third of it, so one second leaves
a healthy worker a third of a second per heartbeat, under load included."""

MAX_EXPIRES: Final = 10 * 366 * 86400.0
"""The longest start deadline as a duration: ten years (the database's interval arithmetic
takes far more; a longer one is a mistake)."""

PRIORITY_RANGE: Final = (-32768, 32767)
MAX_ATTEMPTS_LIMIT: Final = 1000
QUEUE_RE: Final = re.compile(r"[A-Za-z0-9_.-]{1,100}")
NAME_MAX: Final = 200
UNIQUE_KEY_MAX: Final = 500
CONCURRENCY_KEY_MAX: Final = 500


# json.dumps escapes NUL as \u0000 and a lone surrogate as \udXXX (ensure_ascii); either
# in the text sends us to the exact, slower check of every string.
_SUSPECT = re.compile(r"\\u(0000|d[89a-f])")


def encode_json(value: Any, field_name: str) -> str:
    """Compact JSON, refusing what a store cannot hold as it was given: NaN and infinities,
    strings with NUL or lone surrogates (PostgreSQL's jsonb rejects both), object keys
    that are not strings (JSON would turn ``{1: "a"}`` into ``{"1": "a"}``), and more
    than ``config.max_json_bytes()``."""
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
        problem = _unstorable(value, strings=_SUSPECT.search(text) is not None)
    except (TypeError, ValueError) as exc:
        raise InvalidValueError(field_name, f"is not JSON-serializable ({exc})") from None
    except RecursionError:
        raise InvalidValueError(field_name, "is nested too deeply to store") from None
    if problem:
        raise InvalidValueError(field_name, problem)
    limit = config.max_json_bytes()
    size = len(text) if len(text) * 4 <= limit or text.isascii() else len(text.encode())
    if size > limit:
        raise InvalidValueError(
            field_name,
            f"is {size:,} bytes of JSON, over the limit of {limit:,} ({config.MAX_JSON_ENV}): "
            "keep large data in a table or a file and pass its key",
        )
    return text


def _unstorable(value: Any, *, strings: bool) -> str | None:
    """What in ``value`` JSON cannot store faithfully, or None. Strings are looked at only
    when ``strings``: the encoded text already said which values need it."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in item:
                if not isinstance(key, str):
                    kind = type(key).__name__
                    return f"has an object key of type {kind} ({key!r:.40}); keys must be str"
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif strings and isinstance(item, str):
            if "\x00" in item:
                return f"has a NUL character in {item!r:.40}; the database cannot store it"
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return f"has a lone surrogate in {item!r:.40}; it is not valid Unicode"
    return None


def check_int(field_name: str, value: object, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidTypeError(field_name, f"must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidValueError(field_name, f"must be between {low} and {high}, got {value}")


def check_queue(queue: object, field_name: str = "queue") -> str:
    if not isinstance(queue, str):
        raise InvalidTypeError(field_name, f"must be a str, not {type(queue).__name__}")
    if not QUEUE_RE.fullmatch(queue):
        raise InvalidValueError(field_name, f"must match [A-Za-z0-9_.-]{{1,100}}, got {queue!r}")
    return queue


SIGNAL_KEY_MAX: Final = 180
"""Characters of a signal's key at most (a wait's step is named after it)."""


CHILD_KEYS: Final = "task:"
"""The keys a child's end is kept under (``task:<its id>``), which no other signal takes."""


def check_signal_key(key: object) -> str:
    """A signal's key (``txqueue.signal``, ``ctx.wait_for``): text of 1 to 180 characters
    that a store can hold (no NUL, no lone surrogate), not a child's end's."""
    if not isinstance(key, str):
        raise InvalidTypeError("key", f"must be a str, not {type(key).__name__}")
    if not key or len(key) > SIGNAL_KEY_MAX:
        raise InvalidValueError("key", f"must be 1 to {SIGNAL_KEY_MAX} characters")
    if key.startswith(CHILD_KEYS):
        raise InvalidValueError(
            "key", f"{key!r}: keys of {CHILD_KEYS!r} are children's ends (ctx.wait_child)"
        )
    encode_json(key, "key")
    return key


def check_name(name: object, field_name: str = "name") -> str:
    """A task's (or a schedule's) name: any text, not blank, at most ``NAME_MAX``."""
    if not isinstance(name, str):
        raise InvalidTypeError(field_name, f"must be a str, not {type(name).__name__}")
    if not name.strip():
        raise InvalidValueError(field_name, "must not be empty")
    if len(name) > NAME_MAX:
        raise InvalidValueError(field_name, f"must be at most {NAME_MAX} characters")
    return name


def check_states(given: object, known: Sequence[str]) -> tuple[str, ...] | None:
    """A search's ``state``: one of ``known`` or a list of them, each kept once in the
    order given; None: any."""
    if given is None:
        return None
    states = [given] if isinstance(given, str) else given
    if not isinstance(states, Sequence) or not states:
        raise InvalidValueError("state", f"must be a state or a list of them, got {states!r}")
    for state in states:
        if state not in known:
            raise InvalidValueError("state", f"must be one of {', '.join(known)}, got {state!r}")
    return tuple(dict.fromkeys(str(s) for s in states))


def check_positive(field_name: str, value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InvalidTypeError(field_name, f"must be a number, not {type(value).__name__}")
    if not 0 < value < float("inf"):
        raise InvalidValueError(field_name, f"must be a positive number of seconds, got {value}")
    return float(value)


def check_timeout(value: object, field_name: str = "timeout", least: float = MIN_TIMEOUT) -> float:
    seconds = check_positive(field_name, value)
    if seconds > MAX_TIMEOUT:
        limit = f"{MAX_TIMEOUT:,.0f}"
        raise InvalidValueError(field_name, f"must be at most {limit} seconds, got {value}")
    if seconds < least:
        raise InvalidValueError(field_name, f"must be at least {least:g} second, got {value}")
    return seconds


def check_expires(value: object) -> datetime | float:
    """A start deadline: an aware datetime, or a positive duration (a timedelta or seconds)."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidValueError("expires", "must be timezone-aware, not naive")
        return value
    if isinstance(value, timedelta):
        value = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        kind = type(value).__name__
        raise InvalidTypeError("expires", f"must be a datetime, a timedelta or seconds, not {kind}")
    if not 0 < value <= MAX_EXPIRES:
        raise InvalidValueError(
            "expires", f"must be a duration of more than 0 and at most {MAX_EXPIRES:,.0f} seconds"
        )
    return float(value)


def check_time_limit(value: object) -> float:
    return check_timeout(value, "time_limit", least=0.0)
