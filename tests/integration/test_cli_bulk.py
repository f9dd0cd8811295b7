"""`txqueue find` and `txqueue bulk` in real processes: filters from the command line, a
page at a time, a dry run that changes nothing, and a confirmation past the threshold."""

from __future__ import annotations

import json
from typing import Any

import psycopg

import txqueue
from txqueue import Task

from .helpers import execute
from .test_cli import cli, one_line_error


def _enqueue(conn: Any, queue: str, customers: range) -> list[str]:
    with txqueue.transaction(conn):
        ids = [
            txqueue.enqueue(conn, Task("charge", {"customer": n}, queue=queue)) for n in customers
        ]
    conn.commit()
    return [str(i) for i in ids]


def test_find_filters_and_pages(db_url: str, queue: str, conn: Any) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    ids = _enqueue(conn, queue, range(5))
    page = json.loads(cli("find", "--queue", queue, "--limit", "3", "--json", env=env).stdout)
    assert [t["id"] for t in page["tasks"]] == ids[::-1][:3]
    rest = cli("find", "--queue", queue, "--before", page["next_before"], "--json", env=env)
    assert [t["id"] for t in json.loads(rest.stdout)["tasks"]] == ids[::-1][3:]
    one = cli("find", "--payload", "customer=2", "--created-after", "5m", env=env)
    assert one.returncode == 0 and ids[2] in one.stdout and ids[1] not in one.stdout
    none = cli("find", "--payload", 'customer="2"', env=env)
    assert none.stdout.strip() == "no tasks match"
    one_line_error(cli("find", "--state", "done", env=env), "state: must be one of")
    one_line_error(cli("find", "--created-after", "soon", env=env), "--created-after: must be")
    one_line_error(cli("find", "--payload", "customer", env=env), "--payload: must be KEY=VALUE")


def test_bulk_dry_run_confirmation_and_the_change(db_url: str, queue: str, conn: Any) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    ids = _enqueue(conn, queue, range(120))
    dry = cli("bulk", "cancel", "--queue", queue, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith(f"would cancel 120 tasks matching queue={queue}\n")
    assert ids[-1] in dry.stdout  # the sample, newest first
    assert txqueue.count_tasks(conn, txqueue.TaskFilter(queue=queue, state="pending")) == 120
    conn.commit()
    # Past the threshold, without a terminal to ask on: refused until --yes.
    one_line_error(cli("bulk", "cancel", "--queue", queue, env=env), "120 tasks match", "--yes")
    done = cli("bulk", "cancel", "--queue", queue, "--yes", "--batch", "50", "--json", env=env)
    doc = json.loads(done.stdout)
    assert {k: doc[k] for k in ("action", "dry_run", "matched", "changed")} == {
        "action": "cancel",
        "dry_run": False,
        "matched": 120,
        "changed": 120,
    }, done.stderr
    info = txqueue.get_task(conn, ids[0])
    assert info.state == "cancelled" and (info.events[-1].by or "").startswith("cli")
    conn.commit()
    few = cli("bulk", "retry", "--queue", queue, "--payload", "customer=7", env=env)
    assert few.stdout.strip() == f"retried 1 task matching queue={queue} payload=customer=7"
    one_line_error(
        cli("bulk", "delete", "--queue", queue, "--state", "pending", env=env),
        "--state: delete takes tasks that are succeeded, failed, cancelled",
    )
    gone = cli("bulk", "delete", "--queue", queue, "--state", "cancelled", "-y", env=env)
    assert gone.stdout.startswith("deleted 119 tasks"), gone.stderr
    assert txqueue.count_tasks(conn, txqueue.TaskFilter(queue=queue)) == 1
    conn.commit()


def test_dead_letters_listed_retried_and_discarded(db_url: str, queue: str, conn: Any) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    ids = _enqueue(conn, queue, range(3))
    for task_id in ids:
        txqueue.cancel(conn, task_id)
    conn.commit()
    # Failed for good, as a worker's last attempt leaves them (without running one).
    execute(
        db_url,
        "UPDATE txqueue_tasks SET state = 'failed', finished_at = updated_at, errors = "
        """'[{"type": "builtins.TimeoutError", "message": "gateway"}]'""",
    )
    listed = json.loads(cli("dead-letters", "--json", env=env).stdout)["groups"]
    assert [(g["name"], g["error"], g["count"]) for g in listed] == [
        ("charge", "builtins.TimeoutError", 3)
    ]
    table = cli("dead-letters", env=env)
    assert "charge" in table.stdout and "gateway" in table.stdout, table.stderr
    dry = cli("dead-letters", "retry", "charge", "TimeoutError", "--dry-run", env=env)
    assert dry.stdout.startswith("would retry 3 tasks matching name=charge state=failed")
    one_line_error(cli("dead-letters", "--queue", "a b", env=env), "queue: must match")
    gone = cli("dead-letters", "discard", "charge", "builtins.TimeoutError", env=env)
    assert gone.stdout.startswith("deleted 3 tasks"), gone.stderr
    assert cli("dead-letters", env=env).stdout.strip() == "no dead letters"


def test_a_time_too_far_back_is_refused_in_one_line(db_url: str) -> None:
    env = {"TXQUEUE_DATABASE_URL": db_url}
    one_line_error(cli("find", "--created-after", "99999999999d", env=env), "before year 1")


def test_search_index_is_made_on_every_partition_used_by_payload_searches_and_dropped(
    pg_url: str, queue: str
) -> None:
    env = {"TXQUEUE_DATABASE_URL": pg_url}
    with psycopg.connect(pg_url, autocommit=True) as c:
        txqueue.enqueue_many(c, [Task("charge", {"customer": n}, queue=queue) for n in range(50)])
        # What an interrupted CREATE INDEX CONCURRENTLY leaves: an invalid index.
        c.execute("CREATE INDEX txqueue_tasks_s0_payload ON txqueue_tasks_s0 (queue)")
        c.execute(
            "UPDATE pg_index SET indisvalid = false "
            "WHERE indexrelid = 'txqueue_tasks_s0_payload'::regclass"
        )
    for _ in range(2):  # and again: nothing left to do
        made = cli("search-index", env=env)
        assert made.returncode == 0 and "payload index ready" in made.stdout, made.stderr
    with psycopg.connect(pg_url, autocommit=True) as c:
        indexes = c.execute(
            "SELECT c.relname, i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname LIKE 'txqueue_tasks%payload'"
        ).fetchall()
        parts = c.execute(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'txqueue_tasks'::regclass"
        ).fetchone()
        assert parts is not None and len(indexes) == parts[0] + 1  # each, and the parent's
        assert all(valid and "gin (payload jsonb_path_ops)" in d for _, valid, d in indexes)
        c.execute("SET enable_seqscan = off")  # a table this small would be read whole
        where = txqueue.TaskFilter(payload={"customer": 7})
        [found] = txqueue.find_tasks(c, where)
        assert found.payload == {"customer": 7}
        plan = c.execute(
            "EXPLAIN SELECT 1 FROM txqueue_tasks WHERE payload @> '{\"customer\": 7}'"
        ).fetchall()
        assert "txqueue_tasks_s0_payload" in str(plan), plan
    dropped = cli("search-index", "--drop", env=env)
    assert dropped.returncode == 0 and "payload index dropped" in dropped.stdout
    with psycopg.connect(pg_url) as c:
        left = c.execute("SELECT count(*) FROM pg_class WHERE relname LIKE '%payload'").fetchone()
        assert left == (0,)


def test_search_index_on_sqlite_is_refused_in_one_line(sqlite_url: str) -> None:
    refused = cli("search-index", env={"TXQUEUE_DATABASE_URL": sqlite_url})
    assert refused.returncode == 1
    assert one_line_error(refused) == (
        "txqueue: error: search-index: the payload index is PostgreSQL's; on SQLite a search "
        "reads the table"
    )
