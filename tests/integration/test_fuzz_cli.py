"""The CLI's options that parse text, fuzzed on a SQLite database: whatever a user types,
the command does its work or says what is wrong in a line, with no traceback; an enqueue
that fails writes nothing, one that succeeds writes one task. And PostgreSQL's SQL enqueue
function, fuzzed: it inserts one valid task or raises its own message, nothing between."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import hypothesis.strategies as st
import psycopg
from hypothesis import HealthCheck, example, given, settings
from typer.testing import CliRunner

from txqueue.cli import app
from txqueue.core.task import STATES
from txqueue.workflows.graph import FLOW_STATES

from .helpers import connect, count

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
# Text as typed: any, and near-misses of what the options take (times ago, dates, states).
TYPED = (
    st.text()
    | st.from_regex(r"-?[0-9.e]{0,8}[smhd]?", fullmatch=True)
    | st.from_regex(r"[0-9]{1,5}-[0-9]{1,2}-[0-9]{1,2}(T[0-9:]{0,8}Z?)?", fullmatch=True)
    | st.lists(st.sampled_from([*STATES, "done", ""]), max_size=3).map(",".join)
)
FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def run(url: str, *args: str) -> Any:
    result = CliRunner().invoke(app, list(args), env={"TXQUEUE_DATABASE_URL": url})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output, result.output
    assert result.exit_code in (0, 1, 2), result.output
    return result


@FUZZ
@given(payload=(st.text() | JSON.map(json.dumps)).filter(lambda p: not p.startswith(("@", "-"))))
@example(payload="[" * 10_000)
def test_an_enqueue_writes_one_task_or_none_and_says_why(sqlite_url: str, payload: str) -> None:
    before = count(sqlite_url)
    result = run(sqlite_url, "enqueue", "t", "--payload", payload)
    assert count(sqlite_url) == before + (result.exit_code == 0)


@FUZZ
@given(since=TYPED)
@example(since="1e15")  # a traceback before durations were bounded
def test_history_since_any_text_answers_in_a_line(sqlite_url: str, since: str) -> None:
    run(sqlite_url, "history", "--since", since)


@FUZZ
@given(state=TYPED, after=TYPED, payload=st.lists(TYPED, max_size=2), error=st.text())
def test_find_with_any_filter_answers_in_a_line(
    sqlite_url: str, state: str, after: str, payload: list[str], error: str
) -> None:
    args = ["find", "--state", state, "--created-after", after, "--error", error]
    for item in payload:
        args += ["--payload", item]
    run(sqlite_url, *args)


@FUZZ
@given(
    state=TYPED
    | st.lists(st.sampled_from([*FLOW_STATES, "waiting", ""]), max_size=3).map(",".join),
    after=TYPED,
    before=st.uuids().map(str) | st.text(),
    name=st.text(),
)
def test_workflow_list_with_any_filter_answers_in_a_line(
    sqlite_url: str, state: str, after: str, before: str, name: str
) -> None:
    args = ["--state", state, "--created-after", after, "--before", before, "--name", name]
    run(sqlite_url, "workflow", "list", *args)


# Text a driver can send: PostgreSQL's text holds no NUL, and UTF-8 no lone surrogate.
SENDABLE = st.text(
    st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=300
)
SQL_ARGS = st.fixed_dictionaries(
    {
        "name": SENDABLE,
        "payload": JSON.map(json.dumps),  # escaped: any character reaches the function
        "queue": SENDABLE,
        "priority": st.integers(-(2**31), 2**31 - 1),
        "delay": st.none() | st.sampled_from(["-1 second", "0", "1 hour", "10000 years"]),
        "unique_key": st.none() | SENDABLE,
        "max_attempts": st.none() | st.integers(-(2**31), 2**31 - 1),
        "timeout": st.none() | st.floats(),
    }
)


KEYED = {
    "name": "t",
    "payload": "{}",
    "queue": "q",
    "priority": 0,
    "delay": None,
    "unique_key": "k",
    "max_attempts": None,
    "timeout": None,
}


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(args=SQL_ARGS)
@example(args=KEYED)
@example(args=KEYED)  # the key held by the first one's task: its id, nothing written
def test_the_sql_enqueue_function_inserts_one_valid_task_or_refuses(
    pg_url: str, args: dict[str, Any]
) -> None:
    before = count(pg_url)
    sql = (
        "SELECT txqueue_enqueue(%(name)s, %(payload)s::jsonb, %(queue)s, %(priority)s,"
        " delay => %(delay)s::interval, unique_key => %(unique_key)s,"
        " max_attempts => %(max_attempts)s, timeout => %(timeout)s)"
    )
    with contextlib.closing(connect(pg_url)) as c:
        # Examples share the database: a key drawn twice is held by the first one's task,
        # whose id the call returns without writing.
        keys = "SELECT task_id FROM txqueue_unique_keys WHERE unique_key = %s"
        held = c.execute(keys, (args["unique_key"],)).fetchone()
        try:
            [(task_id,)] = c.execute(sql, args).fetchall()
            c.commit()
        except psycopg.Error as exc:
            c.rollback()
            # Its own words (naming the argument), or PostgreSQL's for a value out of its
            # type's range (an interval, a JSON escape jsonb cannot store).
            assert exc.sqlstate is not None and exc.sqlstate[:2] in ("P0", "22"), exc
            assert count(pg_url) == before
            return
        if held is not None:
            assert (task_id,) == held and count(pg_url) == before
            return
        row = c.execute("SELECT name, queue, state FROM txqueue_tasks WHERE id = %s", (task_id,))
        assert row.fetchone() == (args["name"], args["queue"], "pending")
    assert count(pg_url) == before + 1
