"""Describing a failure so that a store can keep it: whatever the exception does, the
task gets an outcome."""

from __future__ import annotations

import traceback


def storable(text: str) -> str:
    """Text any store can hold: NUL and lone surrogates shown escaped instead."""
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def message(exc: BaseException) -> str:
    try:
        return storable(str(exc))
    except Exception:  # a broken __str__ must not cost the task its outcome
        return f"<str() of the {type(exc).__name__} failed>"


def formatted_traceback(exc: BaseException) -> str | None:
    try:
        return storable("".join(traceback.format_exception(exc)))
    except Exception:
        return None
