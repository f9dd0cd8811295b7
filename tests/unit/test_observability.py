"""Log formats and the task fields of records; tracing without OpenTelemetry installed."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from txqueue import TaskContext, TaskLogFilter
from txqueue.observability.logs import JsonFormatter, TextFormatter, task_scope


def record(message: str, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("app", logging.WARNING, __file__, 1, message, None, None)
    rec.__dict__.update(extra)
    return rec


def context() -> TaskContext:
    return TaskContext(
        id=uuid.UUID(int=7),
        name="mail",
        queue="emails",
        attempt=2,
        max_attempts=5,
        worker_id="host:1:abc",
        _heartbeat=lambda: True,
        _cancelled=threading.Event(),
    )


def test_records_inside_a_task_carry_its_fields_and_others_the_workers_id() -> None:
    task_filter = TaskLogFilter(worker_id="host:1:abc")
    outside = record("idle")
    assert task_filter.filter(outside)
    assert (outside.task_id, outside.worker_id) == (None, "host:1:abc")  # type: ignore[attr-defined]
    with task_scope(context()):
        inside = record("sending")
        given = record("about another", task_id="given")
        assert task_filter.filter(inside) and task_filter.filter(given)
    assert given.task_id == "given"  # type: ignore[attr-defined]
    entry = json.loads(JsonFormatter().format(inside))
    assert entry.pop("time").endswith("+00:00")
    assert entry == {
        "level": "WARNING",
        "logger": "app",
        "message": "sending",
        "task_id": str(uuid.UUID(int=7)),
        "task_name": "mail",
        "queue": "emails",
        "attempt": 2,
        "worker_id": "host:1:abc",
    }
    text = TextFormatter().format(inside)
    assert text.endswith(f"WARNING app: sending [task mail {uuid.UUID(int=7)} attempt 2]")


def test_a_json_record_keeps_its_traceback_on_its_one_line() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        rec = logging.LogRecord("app", logging.ERROR, __file__, 1, "x", None, sys.exc_info())
    line = JsonFormatter().format(rec)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["exception"].startswith("Traceback") and "ValueError: bad" in entry["exception"]
    assert "task_id" not in entry


def test_without_opentelemetry_tasks_are_enqueued_and_run_untraced(tmp_path: Path) -> None:
    code = f"""
import sys
sys.modules["opentelemetry"] = None  # as if txqueue[otel] were not installed
import sqlite3, txqueue
from txqueue.observability import tracing
assert tracing.trace is None
url = "sqlite:///{tmp_path / "t.db"}"
from txqueue.store import for_url
for_url(url).apply_schema(for_url(url).connect(url, create=True))
registry = txqueue.Registry()
registry.task("noop")(lambda payload: None)
with sqlite3.connect("{tmp_path / "t.db"}") as c:
    txqueue.enqueue(c, txqueue.Task("noop"))
txqueue.Worker(registry, database_url=url, amqp_url=None).run(burst=True)
with sqlite3.connect("{tmp_path / "t.db"}") as c:
    print(c.execute("SELECT state, trace_context FROM txqueue_tasks").fetchall())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[('succeeded', None)]"
