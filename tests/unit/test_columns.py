"""The task row's declaration (``txqueue.store.columns``) against every statement that
inserts a task, on both stores: each declared column is in each insert that should have it,
nothing else is, and the parameters the Python sends are the ones the SQL names."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

import pytest

from txqueue import Task
from txqueue.store.columns import STEP, STEP_TASK, TASK, Field, copied
from txqueue.store.postgres.connection import QUERIES as PG
from txqueue.store.postgres.enqueue import copy_row, one_params
from txqueue.store.postgres.workflows import _step_row, steps_params
from txqueue.store.records import Planned, WorkflowPlan
from txqueue.store.sql import Queries
from txqueue.store.sqlite.connection import QUERIES as SQLITE
from txqueue.store.sqlite.enqueue import task_row
from txqueue.store.sqlite.workflows import rows_of

_TARGET = re.compile(r"(?:INSERT INTO|COPY) txqueue_tasks \(([^)]*)\)")

# Each insert, and the fields it writes besides the declared ones (a store's own).
PG_INSERTS = {
    "insert_one": (TASK, ()),
    "insert_one_unique": (TASK, ()),
    "insert_many": (TASK, ()),
    "copy_tasks": (copied(TASK), ()),
    "insert_steps": (STEP_TASK + STEP, ("slot",)),
    "copy_steps": (copied(STEP_TASK + STEP), ("slot",)),
}
SQLITE_INSERTS = {
    "insert_task": (TASK, ("created_at", "updated_at")),
    "insert_step": (STEP_TASK + STEP, ("created_at", "updated_at")),
}


def written(statement: str) -> list[str]:
    """The columns a statement inserts into txqueue_tasks."""
    (found,) = _TARGET.findall(statement)
    return [c.strip() for c in found.split(",")]


def stored(fields: tuple[Field, ...]) -> list[str]:
    return [f.name for f in fields if f.stored]


def top_level(text: str) -> list[str]:
    """A comma-separated list split at its own commas, not those inside parentheses; it
    ends at the parenthesis that closes it, if any."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return [*parts, text[start:i].strip()]
        if ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [*parts, text[start:].strip()]


def values(statement: str) -> list[str]:
    """The values an insert gives its columns: its VALUES list, or its SELECT list."""
    match = _TARGET.search(statement)
    assert match is not None
    after = statement[match.end() :].lstrip()
    if after.startswith("VALUES ("):
        return top_level(after.removeprefix("VALUES ("))
    return top_level(after.removeprefix("SELECT ").split("\nFROM", 1)[0])


def test_every_insert_of_a_task_is_one_the_declaration_makes() -> None:
    for queries, known in ((PG, PG_INSERTS), (SQLITE, SQLITE_INSERTS)):
        inserts = {n for n in queries.names() if _TARGET.search(queries[n])}
        assert inserts == set(known)


@pytest.mark.parametrize(
    ("queries", "name"),
    [(PG, n) for n in PG_INSERTS] + [(SQLITE, n) for n in SQLITE_INSERTS],
)
def test_each_declared_column_is_in_each_insert_that_writes_it(queries: Queries, name: str) -> None:
    fields, own = {**PG_INSERTS, **SQLITE_INSERTS}[name]
    statement = queries[name]
    assert written(statement) == [*stored(fields), *own]
    assert "{task_" not in statement and "{step_" not in statement


def test_a_column_is_left_out_only_where_the_declaration_says() -> None:
    everywhere = {f.name for f in TASK if f.stored and f.copy and f.step}
    for name in (*PG_INSERTS, *SQLITE_INSERTS):
        statement = PG[name] if name in PG_INSERTS else SQLITE[name]
        assert everywhere <= set(written(statement)), name
    for f in TASK:
        if f.stored and not f.copy:
            assert f.name not in written(PG["copy_tasks"])
        if f.stored and not f.step:
            assert f.name not in written(PG["insert_steps"])
            assert f.name not in written(SQLITE["insert_step"])


def test_the_values_line_up_with_the_columns() -> None:
    inserts = [(PG, n) for n in PG_INSERTS if not n.startswith("copy")]
    for queries, name in [*inserts, (SQLITE, "insert_task"), (SQLITE, "insert_step")]:
        assert len(values(queries[name])) == len(written(queries[name])), name


TASK_ALL = Task(
    "t",
    {"n": 1},
    queue="q",
    priority=2,
    run_at=datetime(2031, 1, 2, tzinfo=UTC),
    unique_key="k",
    max_attempts=3,
    timeout=9.0,
    concurrency_key="c",
    expires=30.0,
    time_limit=4.0,
)
PLAN = WorkflowPlan(
    uuid.uuid4(),
    "w",
    [
        Planned(uuid.uuid4(), Task("a"), "a", {}, {}),
        Planned(uuid.uuid4(), Task("b"), "b", {"x": "cancel"}, {}),
    ],
)


def test_the_parameters_sent_are_the_ones_each_statement_names() -> None:
    named = re.compile(r"%\((\w+)\)s")
    params = one_params(TASK_ALL, None, False)
    for name in ("insert_one", "insert_one_unique"):
        assert set(named.findall(PG[name])) == set(params)
    steps = steps_params(PLAN, 0, None)
    assert set(named.findall(PG["insert_steps"])) == set(steps)
    assert len(copy_row(TASK_ALL, uuid.uuid4(), None)) == len(written(PG["copy_tasks"]))
    step = _step_row(PLAN.steps[0], 0, None, PLAN.id)
    assert len(step) == len(written(PG["copy_steps"]))

    numbered = re.compile(r"\?(\d+)")
    row = task_row(TASK_ALL, None, 0.0)
    assert {int(n) for n in numbered.findall(SQLITE["insert_task"])} == set(range(1, len(row) + 1))
    _, step_rows = rows_of(PLAN, None, 0.0)
    used = {int(n) for n in numbered.findall(SQLITE["insert_step"])}
    assert used == set(range(1, len(step_rows[0]) + 1))


def test_the_fields_the_call_gives_are_the_row_makers_arguments_in_order() -> None:
    assert [f.name for f in TASK if f.source is None] == ["id", "trace_context"]
    assert [f.name for f in STEP if f.source is None] == ["workflow_id"]
