"""Durations and sizes as people write them in flags and settings: ``90s``, ``15m``, ``7d``,
``200MB``."""

from __future__ import annotations

from .errors import ConfigError

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX_DURATION = 100 * 365 * 86400.0
"""A century: a longer duration is a typo, and a time that far back is out of range."""


def duration(value: str | float, field: str) -> float:
    """Seconds from a number or a string like ``90``, ``90s``, ``15m``, ``24h``, ``7d``, up
    to a century."""
    text = str(value).strip().lower()
    scale = _UNITS.get(text[-1:])
    number = text[:-1] if scale else text
    try:
        seconds = float(number) * (scale or 1.0)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds <= MAX_DURATION:
        raise ConfigError(
            f"{field}: expected seconds or a duration like 90s, 15m, 24h, 7d (at most 100 years);"
            f" got {value!r}"
        )
    return seconds


_SIZES = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def size(value: str | int, field: str) -> int:
    """Bytes from a number or a string like ``200MB``, ``200M``, ``1.5GiB``, ``512k``
    (binary units: a megabyte here is 2**20 bytes)."""
    text = str(value).strip().lower().removesuffix("ib").removesuffix("b")
    scale = _SIZES.get(text[-1:] if text[-1:].isalpha() else "")
    number = text[:-1] if text[-1:].isalpha() else text
    try:
        count = float(number) * scale if scale else float("nan")
    except ValueError:
        count = float("nan")
    if isinstance(value, bool) or not 1 <= count < 2**63:  # ".1" is no byte at all
        raise ConfigError(f"{field}: expected bytes or a size like 200MB, 1.5GB; got {value!r}")
    return int(count)
