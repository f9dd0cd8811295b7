"""ctx.progress's arguments, as checked and stored, and how a progress reads back."""

from __future__ import annotations

import json
import threading
import uuid
from fractions import Fraction

import pytest

from txqueue.errors import InvalidTypeError, InvalidValueError
from txqueue.tasks import progress
from txqueue.tasks.context import TaskContext, reported


def test_a_report_is_stored_as_json_and_reads_back() -> None:
    text = progress.encode(3, 12, "copying")
    doc = json.loads(text)
    assert (doc["done"], doc["total"], doc["message"]) == (3, 12, "copying")
    read = progress.decode(text)
    assert read is not None
    assert (read.done, read.total, read.message, read.fraction) == (3, 12, "copying", 0.25)
    assert read.describe() == "3/12 (25%): copying"
    assert progress.decode(doc) == read  # a driver's dict, as a jsonb column may load
    assert progress.decode(None) is None


def test_a_report_a_handler_gets_wrong_by_its_arithmetic_is_kept_all_the_same() -> None:
    # Nothing to do, more done than planned, a Fraction: a report never fails the task.
    for done, total, fraction in [(0, 0, 1.0), (5, 4, 1.0), (Fraction(1, 2), 1, 0.5)]:
        read = progress.decode(progress.encode(done, total))
        assert read is not None and read.fraction == fraction


def test_without_a_total_or_message() -> None:
    read = progress.decode(progress.encode(2.5))
    assert read is not None
    assert (read.fraction, read.describe()) == (None, "2.5")
    assert read.as_json()["total"] is None


@pytest.mark.parametrize(
    ("args", "error", "field"),
    [
        (("3",), InvalidTypeError, "done"),
        ((True,), InvalidTypeError, "done"),
        ((-1,), InvalidValueError, "done"),
        ((float("nan"),), InvalidValueError, "done"),
        ((float("inf"), None), InvalidValueError, "done"),
        ((10**400,), InvalidValueError, "done"),
        ((1, float("inf")), InvalidValueError, "total"),
        ((1, -2), InvalidValueError, "total"),
        ((1, 2, 3), InvalidTypeError, "message"),
        ((1, 2, "x" * 501), InvalidValueError, "message"),
        ((1, 2, "nul \x00"), InvalidValueError, "message"),
    ],
)
def test_bad_arguments_name_their_field(
    args: tuple[object, ...], error: type[Exception], field: str
) -> None:
    with pytest.raises(error, match=field):
        progress.encode(*args)


def test_the_context_keeps_the_last_report_and_hands_each_on() -> None:
    told: list[str] = []
    ctx = TaskContext(uuid.uuid4(), "t", "q", 1, 5, "w", lambda: True, threading.Event())
    ctx.progress(1, 2)  # nowhere to go: kept all the same
    ctx._report = told.append
    ctx.progress(2, 2, "done")
    assert len(told) == 1 and reported(ctx) == told[0]
    assert json.loads(told[0])["message"] == "done"
