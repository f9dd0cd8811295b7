"""The payload of a wake-up by NOTIFY: written by the store, read by a worker's listener."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from txqueue.outbox.notes import note, notes_for, read_note


def test_a_note_names_the_queue_and_a_time_only_for_a_task_due_later() -> None:
    assert note("emails") == "emails"
    assert read_note("emails") == ("emails", None)
    assert read_note(note("emails", 1_800_000_000.25)) == ("emails", 1_800_000_000.25)


def test_notes_are_one_per_queue_due_now_and_one_for_the_soonest_later() -> None:
    at = datetime.now(UTC) + timedelta(seconds=90)
    tasks = [("a", None, None)] * 500 + [("a", None, 30.0), ("a", at, None), ("b", None, 60.0)]
    before = time.time()
    notes = notes_for(tasks)
    assert notes[0] == "a" and len(notes) == 3
    soonest = {q: float(due) for q, due in (n.split(" ") for n in notes[1:])}
    assert before + 29.99 <= soonest["a"] <= time.time() + 30.01
    assert before + 59.99 <= soonest["b"] <= time.time() + 60.01
    assert notes_for([("a", datetime.now(UTC) - timedelta(seconds=5), None)]) == ["a"]
    assert notes_for([]) == []


@pytest.mark.parametrize("payload", ["", " 12", "a b", "a 1 2", "a 1e"])
def test_anything_else_is_refused_by_name(payload: str) -> None:
    with pytest.raises(ValueError, match="not a wake-up"):
        read_note(payload)
