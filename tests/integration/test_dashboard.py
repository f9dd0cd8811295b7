"""The dashboard's pages and actions, on both stores, served by uvicorn on a real socket,
and its queries' plans."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
import uvicorn

import txqueue
from txqueue import Task
from txqueue.dashboard import app as dashboard
from txqueue.dashboard import pages as dashboard_pages
from txqueue.store import SQLITE
from txqueue.store.postgres.connection import QUERIES as queries
from txqueue.store.sqlite.connection import QUERIES as sqlite_queries
from txqueue.testing import run_tasks

from .helpers import (
    connect,
    execute,
    free_port,
    own_connection,
    plan_as_run,
    rows,
    tasks_read_whole,
)
from .test_cli import ROOT, TXQUEUE, cli, one_line_error

HOSTILE = "<script>document.title='owned'</script>"


@contextmanager
def serving(app: Any) -> Iterator[httpx.Client]:
    """``app`` on uvicorn on a free loopback port, and a client that keeps its cookies."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "the dashboard did not start"
            time.sleep(0.01)
        base = f"http://127.0.0.1:{port}"
        # As a browser submits the dashboard's own forms.
        with httpx.Client(base_url=base, headers={"Origin": base}, timeout=10) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def web(db_url: str) -> Iterator[httpx.Client]:
    with serving(dashboard.create_app(db_url)) as client:
        yield client


def enqueue(db_url: str, *tasks: Task) -> list[uuid.UUID]:
    with closing(connect(db_url, autocommit=True)) as c:
        return txqueue.enqueue_many(c, list(tasks))


def fail(db_url: str, task_id: uuid.UUID, message: str = "it broke") -> None:
    """The task as a worker leaves it after its last attempt failed."""
    entry = [
        {
            "attempt": 1,
            "at": "2026-11-24T10:00:00+00:00",
            "worker_id": "w1",
            "type": "ValueError",
            "message": message,
            "traceback": f"Traceback (most recent call last):\nValueError: {message}\n",
        }
    ]
    now = (
        "now()" if db_url.startswith("postgresql") else "((julianday('now') - 2440587.5) * 86400.0)"
    )
    execute(
        db_url,
        f"UPDATE txqueue_tasks SET state = 'failed', attempts = 1, finished_at = {now}, "
        "errors = %s WHERE id = %s",
        (json.dumps(entry), str(task_id)),
    )


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def test_the_overview_counts_each_queue_and_names_what_fails(
    web: httpx.Client, db_url: str, queue: str
) -> None:
    ids = enqueue(db_url, *[Task("report.build", i, queue=queue) for i in range(3)])
    enqueue(db_url, Task("later", queue=queue, delay=3600))
    fail(db_url, ids[0])
    page = web.get("/")
    assert page.status_code == 200
    row = page.text[page.text.index(f">{queue}</a>") :].split("</tr>")[0]
    cells = re.findall(r'<td class="n[^"]*">\s*(?:<a [^>]*>)?([\d,+-]+)', row)
    # ripe, scheduled, running, parked, succeeded, failed, cancelled
    assert cells[:7] == ["2", "1", "0", "0", "0", "1", "0"], row
    assert "report.build" in page.text.split("Failing most")[1]
    assert 'http-equiv="refresh"' in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'none'")


def test_task_list_filters_pages_newest_first_and_finds_by_id(
    web: httpx.Client, db_url: str, queue: str
) -> None:
    ids = enqueue(db_url, *[Task("n", i, queue=queue) for i in range(120)])
    seen: list[str] = []
    url: str | None = f"/tasks?queue={queue}"
    while url:
        page = web.get(url)
        assert page.status_code == 200
        seen += re.findall(r'<td class="id"><a href="/tasks/([0-9a-f-]+)"', page.text)
        found = re.search(r'<a href="([^"]+)" rel="next">', page.text)
        url = found.group(1).replace("&amp;", "&") if found else None
    assert seen == [str(i) for i in reversed(ids)]  # each once, newest first
    fail(db_url, ids[7])
    only = web.get(f"/tasks?queue={queue}&state=failed").text
    assert re.findall(r'href="/tasks/([0-9a-f-]+)"', only) == [str(ids[7])]
    found = web.get(f"/tasks?id={ids[7]}")
    assert found.status_code == 303 and found.headers["location"] == f"/tasks/{ids[7]}"
    bad = web.get("/tasks?state=lost")
    assert bad.status_code == 400 and "state must be one of" in bad.text
    assert web.get("/tasks?id=not-a-uuid").status_code == 400
    assert web.get(f"/tasks/{uuid.uuid4()}").status_code == 404


def test_a_page_looks_through_a_bounded_window_and_carries_on_below_it(
    web: httpx.Client, db_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dashboard_pages, "WINDOW", 10)
    ids = enqueue(db_url, *[Task("n", i, queue=queue) for i in range(25)])
    fail(db_url, ids[2])
    url: str | None = f"/tasks?state=failed&queue={queue}"
    pages = []
    while url:
        page = web.get(url).text
        pages.append(re.findall(r'href="/tasks/([0-9a-f-]+)"', page))
        found = re.search(r'<a href="([^"]+)" rel="next">', page)
        url = found.group(1).replace("&amp;", "&") if found else None
    # 25 tasks, 10 a window: three pages, the match on the last.
    assert pages == [[], [], [str(ids[2])]]


def test_values_from_the_database_are_shown_never_run(
    web: httpx.Client, db_url: str, queue: str
) -> None:
    (task_id,) = enqueue(db_url, Task("n", {"note": HOSTILE}, queue=queue))
    fail(db_url, task_id, HOSTILE)
    for page in (web.get(f"/tasks/{task_id}").text, web.get(f"/tasks?queue={queue}").text):
        assert "<script>" not in page
    shown = web.get(f"/tasks/{task_id}").text
    assert "&lt;script&gt;document.title=" in shown
    assert "Traceback (most recent call last)" in shown


def test_a_tasks_page_lists_the_steps_its_handler_recorded(
    web: httpx.Client, db_url: str, queue: str
) -> None:
    registry = txqueue.Registry()

    @registry.task("stepped", queue=queue, context=True)
    def stepped(ctx: txqueue.TaskContext) -> None:
        ctx.step("fetch", lambda: {"note": HOSTILE})

    (task_id,) = enqueue(db_url, Task("stepped", queue=queue))
    run_tasks(registry, db_url)
    page = web.get(f"/tasks/{task_id}").text
    steps = page.split("<h2>Steps</h2>")[1].split("<h2>")[0]
    assert "<td>fetch</td><td>1</td>" in steps and "&lt;script&gt;document.title=" in steps
    assert "<script>" not in page


def test_a_long_payload_is_cut_short_on_its_page(
    web: httpx.Client, db_url: str, queue: str
) -> None:
    (task_id,) = enqueue(db_url, Task("n", {"note": "x" * 200_000}, queue=queue))
    page = web.get(f"/tasks/{task_id}").text
    assert "more characters (txqueue show --full prints it whole)" in page
    assert len(page) < 20_000


def test_retry_and_cancel_need_the_pages_csrf_token(
    web: httpx.Client, db_url: str, queue: str
) -> None:
    failed, waiting = enqueue(db_url, Task("n", 1, queue=queue), Task("n", 2, queue=queue))
    fail(db_url, failed)
    page = web.get(f"/tasks/{failed}")
    token = csrf(page.text)
    refused = web.post(f"/tasks/{failed}/retry", data={"csrf": "forged"})
    assert refused.status_code == 403
    # Another origin (another port of this host, say) that planted the cookie: refused.
    other = {"Origin": "http://127.0.0.1:1"}
    assert (
        web.post(f"/tasks/{failed}/retry", data={"csrf": token}, headers=other).status_code == 403
    )
    assert web.post(f"/tasks/{failed}/retry").status_code == 403
    assert {r["state"] for r in rows(db_url, f"id = '{failed}'")} == {"failed"}
    done = web.post(f"/tasks/{failed}/retry", data={"csrf": token})
    assert done.status_code == 303 and done.headers["location"].endswith("?done=retried")
    assert "Retried" in web.get(done.headers["location"]).text
    assert {r["state"] for r in rows(db_url, f"id = '{failed}'")} == {"pending"}
    history = web.get(f"/tasks/{failed}").text.split("<h2>History</h2>")[1]
    assert "failed → pending" in history and "<td>dashboard</td>" in history
    again = web.post(f"/tasks/{failed}/retry", data={"csrf": token})
    assert again.status_code == 409 and "only failed or cancelled" in again.text
    cancelled = web.post(f"/tasks/{waiting}/cancel", data={"csrf": token})
    assert cancelled.status_code == 303
    assert {r["state"] for r in rows(db_url, f"id = '{waiting}'")} == {"cancelled"}


def test_a_workflows_page_shows_each_step_and_cancels_those_not_ended(
    web: httpx.Client, db_url: str, queue: str
) -> None:
    flow = txqueue.Workflow("nightly")
    first = flow.add(Task("n", 1, queue=queue), name="extract")
    flow.add(Task("n", 2, queue=queue), after=[first], name="load")
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        txqueue.enqueue_workflow(c, flow)

    page = web.get(f"/workflows/{flow.id}")
    assert page.status_code == 200
    assert "nightly" in page.text and f'href="/tasks/{first.id}"' in page.text
    load = page.text.split(">load<")[1].split("</tr>")[0]
    assert "waiting" in load and "<td>extract</td>" in load
    done = web.post(f"/workflows/{flow.id}/cancel", data={"csrf": csrf(page.text)})
    assert done.status_code == 303
    after = web.get(done.headers["location"]).text
    assert "the steps not ended will not run" in after and after.count("blocked") == 0
    assert {r["state"] for r in rows(db_url)} == {"cancelled"}
    assert web.get(f"/workflows/{first.id}").status_code == 404


def test_retry_every_failed_task_of_a_queue(web: httpx.Client, db_url: str, queue: str) -> None:
    ids = enqueue(db_url, *[Task("n", i, queue=queue) for i in range(4)])
    for task_id in ids[:3]:
        fail(db_url, task_id)
    token = csrf(web.get("/").text)
    done = web.post("/retry-failed", data={"csrf": token, "queue": queue})
    assert done.status_code == 303
    assert "Retried 3 failed tasks." in web.get(done.headers["location"]).text
    assert sorted(r["state"] for r in rows(db_url)) == ["pending"] * 4


def test_a_queue_is_paused_resumed_and_limited_from_the_overview(
    web: httpx.Client, db_url: str, queue: str
) -> None:
    enqueue(db_url, Task("n", queue=queue))
    token = csrf(web.get("/").text)
    paused = web.post("/queues/pause", data={"csrf": token, "queue": queue})
    assert paused.status_code == 303
    page = web.get(paused.headers["location"]).text
    assert "Paused: none of the queue" in page and "Resume</button>" in page
    with closing(connect(db_url)) as c:
        assert txqueue.get_queue(c, queue).paused
    limited = web.post(
        "/queues/limit",
        data={"csrf": token, "queue": queue, "rate_limit": "600/min", "concurrency": "3"},
    )
    assert limited.status_code == 303
    assert "paused, 600/min, 3 at once" in web.get("/").text
    bad = web.post("/queues/limit", data={"csrf": token, "queue": queue, "rate_limit": "fast"})
    assert bad.status_code == 400 and "rate_limit: &#39;fast&#39; is not a rate" in bad.text
    resumed = web.post("/queues/resume", data={"csrf": token, "queue": queue})
    assert resumed.status_code == 303
    form = {"csrf": token, "queue": queue, "rate_limit": "", "concurrency": "3"}
    assert web.post("/queues/limit", data=form).status_code == 303
    with closing(connect(db_url)) as c:
        assert txqueue.get_queue(c, queue) == txqueue.QueueSettings(queue, concurrency=3)
    assert web.post("/queues/pause", data={"csrf": "forged", "queue": queue}).status_code == 403


def test_schedules_are_made_changed_paused_resumed_and_deleted_from_their_page(
    web: httpx.Client, db_url: str, queue: str
) -> None:
    assert "No schedules" in web.get("/schedules").text
    token = csrf(web.get("/schedules").text)
    form = {"csrf": token, "name": "nightly", "task": "report", "queue": queue}
    form |= {"cron": "0 3 * * *", "timezone": "Europe/Paris", "payload": '{"kind": "daily"}'}
    made = web.post("/schedules/create", data=form)
    assert made.status_code == 303
    page = web.get(made.headers["location"]).text
    assert "Schedule created" in page and "nightly" in page and "Europe/Paris" in page
    assert '{"kind": "daily"}' in page and "Pause</button>" in page
    again = web.post("/schedules/create", data=form)
    assert again.status_code == 400 and "a schedule named &#39;nightly&#39; exists" in again.text
    bad = web.post("/schedules/create", data={**form, "name": "x", "payload": "{"})
    assert bad.status_code == 400 and "payload: not valid JSON" in bad.text
    wrong = web.post("/schedules/create", data={**form, "name": "x", "cron": "3 o'clock"})
    assert wrong.status_code == 400 and "cron: " in wrong.text

    editing = web.get("/schedules?edit=nightly").text
    assert "Change schedule nightly" in editing and 'value="0 3 * * *"' in editing
    changed = web.post(
        "/schedules/change", data={**form, "cron": "30 4 * * *", "payload": "", "catch_up": "on"}
    )
    assert changed.status_code == 303
    paused = web.post("/schedules/pause", data={"csrf": token, "name": "nightly"})
    assert paused.status_code == 303
    page = web.get(paused.headers["location"]).text
    assert "Paused: the schedule enqueues nothing" in page and "Resume</button>" in page
    with closing(connect(db_url)) as c:
        shown = txqueue.get_schedule(c, "nightly")
    assert (shown.cron, shown.payload, shown.catch_up, shown.paused) == (
        "30 4 * * *",
        None,
        True,
        True,
    )
    assert web.post("/schedules/resume", data={"csrf": token, "name": "nightly"}).status_code == 303
    missing = web.post("/schedules/pause", data={"csrf": token, "name": "missing"})
    assert missing.status_code == 404 and "no schedule named" in missing.text
    odd = web.post("/schedules/erase", data={"csrf": token, "name": "nightly"})
    assert odd.status_code == 400 and "must be pause, resume or delete" in odd.text
    forged = web.post("/schedules/delete", data={"csrf": "forged", "name": "nightly"})
    assert forged.status_code == 403
    deleted = web.post("/schedules/delete", data={"csrf": token, "name": "nightly"})
    assert deleted.status_code == 303
    with closing(connect(db_url)) as c:
        assert txqueue.list_schedules(c) == []
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        txqueue.create_schedule(c, HOSTILE, cron="0 * * * *", task=HOSTILE, payload=[HOSTILE])
    assert HOSTILE not in web.get("/schedules").text
    assert HOSTILE not in web.get("/schedules", params={"edit": HOSTILE}).text


def test_read_only_shows_no_action_and_accepts_none(db_url: str, queue: str) -> None:
    (task_id,) = enqueue(db_url, Task("n", queue=queue))
    fail(db_url, task_id)
    with serving(dashboard.create_app(db_url, read_only=True)) as web:
        page = web.get(f"/tasks/{task_id}").text
        assert "read-only" in page and "<button" not in page
        assert "<button" not in web.get("/").text
        listed = web.get(f"/tasks?state=failed&queue={queue}").text
        assert str(task_id) in listed and 'type="checkbox"' not in listed
        assert "Retry selected" not in listed
        letters = web.get("/dead-letters").text
        assert "ValueError" in letters and "it broke" in letters
        assert "<button" not in letters
        assert web.post(f"/tasks/{task_id}/retry", data={"csrf": "x"}).status_code in (404, 405)
        assert web.post("/tasks/bulk", data={"csrf": "x"}).status_code in (404, 405)
        assert web.post("/dead-letters/discard", data={"csrf": "x"}).status_code in (404, 405)
        with closing(connect(db_url)) as c, txqueue.transaction(c):
            txqueue.create_schedule(c, "nightly", cron="0 3 * * *", task="report")
        timetable = web.get("/schedules").text
        assert (
            "nightly" in timetable
            and "<button" not in timetable
            and "<form" not in timetable.split("</header>")[1]
        )
        for action in ("create", "change", "pause", "delete"):
            refused = web.post(f"/schedules/{action}", data={"csrf": "x", "name": "nightly"})
            assert refused.status_code in (404, 405)
    assert {r["state"] for r in rows(db_url)} == {"failed"}


def test_bulk_forms_refuse_a_forged_token_and_say_what_is_missing(db_url: str, queue: str) -> None:
    (task_id,) = enqueue(db_url, Task("n", queue=queue))
    fail(db_url, task_id)
    with serving(dashboard.create_app(db_url)) as web:
        page = web.get(f"/tasks?state=failed&queue={queue}")
        token = web.cookies[dashboard_pages.CSRF_COOKIE]
        assert "all 1 matching" in page.text
        forged = {"csrf": "forged", "action": "retry", "id": task_id}
        assert web.post("/tasks/bulk", data=forged).status_code == 403
        none = web.post("/tasks/bulk", data={"csrf": token, "action": "retry"})
        assert none.status_code == 400 and "no task ticked" in none.text
        every = {"csrf": token, "action": "cancel", "all": "on", "queue": queue}
        unfiltered = web.post("/tasks/bulk", data=every)
        assert unfiltered.status_code == 400 and "choose a state first" in unfiltered.text
        odd = web.post("/dead-letters/erase", data={"csrf": token, "name": "n", "error": "x"})
        assert odd.status_code == 400 and "must be retry or discard" in odd.text
        done = web.post("/tasks/bulk", data={"csrf": token, "action": "retry", "id": task_id})
        assert done.status_code == 303 and "done=bulk_retried&n=1" in done.headers["location"]
    assert {r["state"] for r in rows(db_url)} == {"pending"}


def test_without_a_token_only_loopback_names_are_served(web: httpx.Client) -> None:
    assert web.get("/", headers={"Host": "localhost:8080"}).status_code == 200
    assert web.get("/", headers={"Host": "[::1]:8080"}).status_code == 200
    # A page whose domain was re-pointed at 127.0.0.1 (DNS rebinding) learns nothing.
    assert web.get("/", headers={"Host": "rebound.example:8080"}).status_code == 421


def test_a_token_guards_every_page(db_url: str) -> None:
    app = dashboard.create_app(db_url, token="s3cret")
    with serving(app) as web:
        assert web.get("/").status_code == 401
        assert web.get("/static/style.css").status_code == 401
        assert web.get("/?token=wrong").status_code == 401
        assert web.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        entry = web.get("/tasks?token=s3cret&state=failed")
        assert entry.status_code == 303 and entry.headers["location"] == "/tasks?state=failed"
        assert web.get("/tasks?state=failed").status_code == 200  # the cookie, from now on


def test_the_workers_page_shows_what_each_worker_runs(
    web: httpx.Client, db_url: str, queue: str
) -> None:
    (task_id,) = enqueue(db_url, Task("slow", queue=queue))
    now = (
        "now()" if db_url.startswith("postgresql") else "((julianday('now') - 2440587.5) * 86400.0)"
    )
    execute(
        db_url,
        f"UPDATE txqueue_tasks SET state = 'running', worker_id = 'host:1:abc', attempts = 1, "
        f"start_time = {now}, expires_at = {now} WHERE id = %s",
        (str(task_id),),
    )
    page = web.get("/workers").text
    assert "host:1:abc" in page and str(task_id) in page and "not reporting" in page


def test_a_tasks_page_tells_its_lease_end_from_its_start_deadline(
    web: httpx.Client, db_url: str, queue: str
) -> None:
    (task_id,) = enqueue(db_url, Task("slow", queue=queue, expires=3600))
    soon = (
        "now() + interval '5 minutes'"
        if db_url.startswith("postgresql")
        else "((julianday('now') - 2440587.5) * 86400.0 + 300)"
    )
    execute(
        db_url,
        f"UPDATE txqueue_tasks SET state = 'running', worker_id = 'host:1:abc', attempts = 1, "
        f"expires_at = {soon} WHERE id = %s",
        (str(task_id),),
    )
    page = web.get(f"/tasks/{task_id}").text
    fields = dict(re.findall(r"<tr><th>(\w+)</th><td>([^<]*)</td></tr>", page))
    assert "expires_at" not in fields and "start_by" not in fields
    lease, deadline = (datetime.fromisoformat(fields[k]) for k in ("lease_expires_at", "expires"))
    assert lease < deadline and lease.utcoffset() == deadline.utcoffset() == timedelta(0)


def test_the_database_gone_is_one_clear_page_without_the_password(queue: str) -> None:
    url = "postgresql://postgres:hunter2@127.0.0.1:1/nowhere"
    with serving(dashboard.create_app(url)) as web:
        page = web.get("/")
    assert page.status_code == 503 and "hunter2" not in page.text


def test_the_dashboards_queries_read_their_indexes(pg_url: str) -> None:
    with own_connection(pg_url) as c:
        # A long history: mostly succeeded, a few of every other state.
        c.execute(
            "INSERT INTO txqueue_tasks (id, queue, name, state, finished_at, expires_at) "
            "SELECT gen_random_uuid(), 'q' || i % 3, 'n', s, "
            "       CASE WHEN s IN ('pending', 'running') THEN NULL ELSE now() END, "
            "       CASE WHEN s = 'running' THEN now() END "
            "FROM generate_series(1, 30000) i, LATERAL (SELECT CASE i % 100 "
            "    WHEN 0 THEN 'pending' WHEN 1 THEN 'running' WHEN 2 THEN 'failed' "
            "    WHEN 3 THEN 'cancelled' ELSE 'succeeded' END s) x"
        )
        c.execute("ANALYZE txqueue_tasks")
        top = uuid.UUID(int=(1 << 128) - 1)
        page = {"before": top, "window": 100, "state": "failed", "queue": None, "name": None}
        for sql, params in [
            (queries["queue_counts"], {"cap": 100}),
            (queries["finished_per_minute"], {"cap": 100}),
            (queries["failing_names"], {"cap": 100, "limit": 5}),
            (queries["browse"], {**page, "limit": 50}),
            (queries["window_end"], page),
            (queries["running_tasks"], {"limit": 100}),
        ]:
            plan = plan_as_run(c, sql, params)
            assert tasks_read_whole(plan) == [], sql
            assert '"Limit"' in plan, sql
        c.rollback()


def test_the_dashboards_sqlite_queries_read_their_indexes(sqlite_url: str) -> None:
    with closing(SQLITE.connect(sqlite_url)) as c:
        c.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) "
            "INSERT INTO txqueue_tasks (id, queue, name, payload, state, run_at, finished_at, "
            "  created_at, updated_at) "
            "SELECT printf('%032x', i), 'q' || i % 3, 'n', '{}', "
            "  CASE i % 100 WHEN 0 THEN 'pending' WHEN 1 THEN 'running' WHEN 2 THEN 'failed' "
            "    ELSE 'succeeded' END, 0, CASE WHEN i % 100 > 1 THEN 1 END, 0, 0 FROM n"
        )
        c.execute("ANALYZE")
        page = {"before": "f" * 32, "window": 100, "state": "failed", "queue": None, "name": None}
        for sql, params in [
            (sqlite_queries["queue_counts"], {"cap": 100, "now": 1.0}),
            (sqlite_queries["finished_per_minute"], {"cap": 100, "now": 1.0}),
            (sqlite_queries["failing_names"], {"cap": 100, "limit": 5, "now": 1.0}),
            (sqlite_queries["browse"], {**page, "limit": 50}),
            (sqlite_queries["window_end"], page),
            (sqlite_queries["running_tasks"], {"limit": 100}),
        ]:
            steps = [r[3] for r in c.execute("EXPLAIN QUERY PLAN " + sql, params)]
            # "SCAN txqueue_tasks" alone reads the whole table; with an index it says which.
            assert "SCAN txqueue_tasks" not in steps, (sql, steps)


def test_txqueue_dashboard_serves_and_guards_its_address(db_url: str) -> None:
    open_to_all = cli("dashboard", "--host", "0.0.0.0", "--database-url", db_url)
    one_line_error(open_to_all, "--host 0.0.0.0", "--token", "TXQUEUE_DASHBOARD_TOKEN")
    port = free_port()
    args = ["dashboard", "--port", str(port), "--database-url", db_url]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")}
    server = subprocess.Popen(
        [*TXQUEUE, *args], env=env, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert server.stderr is not None
        assert f"on http://127.0.0.1:{port}/" in server.stderr.readline()
        deadline = time.monotonic() + 15
        while True:
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/workers").status_code == 200
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the dashboard never answered"
                time.sleep(0.1)
        taken = cli(*args)
        one_line_error(taken, f"cannot listen on 127.0.0.1:{port}")
    finally:
        server.terminate()
        server.communicate(timeout=10)
