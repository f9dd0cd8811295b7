"""The vacuum horizon, end to end: the worker's gauge and warning, the cleaner's loop and
cron run (real processes), `txqueue status`, the dashboard's banner (and in Chromium); and
on a private cluster what the shared server must not be changed for: prepared
transactions, replication slots, a hot standby's feedback, a role without pg_monitor."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
import urllib.error
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from playwright.sync_api import sync_playwright

import txqueue
from txqueue import Task
from txqueue.dashboard import app as dashboard
from txqueue.errors import StoreError
from txqueue.observability.horizon import Watch
from txqueue.store import POSTGRES, PostgresStore
from txqueue.store.reports import HOLDER_BACKEND, HOLDER_PREPARED, HOLDER_SLOT, HorizonHolder
from txqueue.worker import leases

from .cluster import Server, cluster, standby
from .helpers import (
    connect,
    count,
    execute,
    free_port,
    held_open,
    http_get,
    running,
    samples,
    value,
    wait_until,
)
from .test_cli import ROOT, cli, one_line_error
from .test_cli_json import check
from .test_dashboard import HOSTILE, serving
from .test_dashboard_browser import CHROMIUM, FLAGS

pytestmark = pytest.mark.xdist_group("test_vacuum_horizon")

GAUGE = "txqueue_vacuum_horizon_age_seconds"


def scrape(port: int) -> float:
    status, text = http_get(port, "/metrics")
    assert status == 200, text
    return value(samples(text), GAUGE)


def test_a_worker_reads_it_into_its_gauge_and_warns_once_when_past_and_once_when_clear(
    pg_url: str, queue: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(leases, "READ_EVERY", 0.2)  # once a minute, in a hurry
    caplog.set_level(logging.WARNING, logger="txqueue.horizon")
    registry = txqueue.Registry()
    registry.task("noop", queue=queue)(lambda payload: None)
    worker = txqueue.Worker(
        registry,
        database_url=pg_url,
        amqp_url=None,
        metrics_port=0,
        metrics_host="127.0.0.1",
        vacuum_horizon_warn=1,
    )
    with running(worker):
        wait_until(lambda: worker.metrics_port != 0)
        assert scrape(worker.metrics_port) == 0
        with held_open(pg_url, "nightly-export") as pid:
            wait_until(lambda: scrape(worker.metrics_port) >= 1.0)
            # Claims go on beside it: the reading is the lease keeper's, once a minute.
            with contextlib.closing(connect(pg_url, autocommit=True)) as c:
                txqueue.enqueue(c, Task("noop", queue=queue))
            wait_until(lambda: count(pg_url, "state = 'succeeded'") == 1)
            time.sleep(1)  # more readings, all past the threshold
        wait_until(lambda: scrape(worker.metrics_port) == 0)
        time.sleep(0.5)  # more readings, all clear
    said = [r.getMessage() for r in caplog.records if r.name == "txqueue.horizon"]
    assert len(said) == 2, said
    assert said[0].startswith(f"vacuum horizon held back past 1 s by pid {pid} (nightly-export,")
    assert "idle in transaction, open since" in said[0] and "how-to/vacuum-horizon.md" in said[0]
    assert said[1] == "vacuum horizon no longer held back past 1 s (nothing holds it back)"


def test_a_reading_that_fails_costs_the_worker_nothing(
    pg_url: str,
    queue: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def refused(self: PostgresStore, conn: object) -> HorizonHolder | None:
        raise StoreError("vacuum horizon: permission denied for view pg_stat_activity")

    monkeypatch.setattr(PostgresStore, "vacuum_horizon", refused)
    monkeypatch.setattr(leases, "READ_EVERY", 0.1)
    caplog.set_level(logging.DEBUG, logger="txqueue.horizon")
    registry = txqueue.Registry()
    registry.task("noop", queue=queue)(lambda payload: None)
    worker = txqueue.Worker(registry, database_url=pg_url, amqp_url=None)
    with running(worker):
        wait_until(lambda: "could not read the vacuum horizon" in caplog.text)
        with contextlib.closing(connect(pg_url, autocommit=True)) as c:
            txqueue.enqueue_many(c, [Task("noop", i, queue=queue) for i in range(3)])
        wait_until(lambda: count(pg_url, "state = 'succeeded'") == 3)
        time.sleep(0.5)
        assert worker.unhealthy() is None
    failed = [r for r in caplog.records if "vacuum horizon" in r.getMessage()]
    assert {r.levelno for r in failed} == {logging.DEBUG}


def gauge(port: int) -> float:
    """The gauge on a port that may not serve yet (-1)."""
    try:
        return scrape(port)
    except (urllib.error.URLError, ConnectionError):
        return -1.0


@contextlib.contextmanager
def process(argv: list[str], env: dict[str, str], log: Path) -> Iterator[None]:
    with open(log, "w") as out:  # a file: a pipe nobody reads would fill and stall it
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stderr=out)
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_cleaner_loop_warns_once_and_serves_the_gauge_and_a_cron_run_warns(
    pg_url: str, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        "TXQUEUE_DATABASE_URL": pg_url,
        "TXQUEUE_VACUUM_HORIZON_WARN": "1",
        "PATH": os.environ["PATH"],
    }
    loop = [sys.executable, "-m", "txqueue", "cleaner", "--loop", "--interval", "0.3"]
    loop += ["--metrics-port", str(port), "--metrics-host", "127.0.0.1"]
    said = tmp_path / "cleaner.log"
    with process(loop, env, said):
        wait_until(lambda: gauge(port) == 0.0, timeout=20)
        with held_open(pg_url, "nightly-export") as pid:
            wait_until(lambda: gauge(port) >= 1.0, timeout=20)
            cron = cli("cleaner", "--once", env=env)
            time.sleep(1)  # a few passes more, all past the threshold
            held = gauge(port)
        wait_until(lambda: gauge(port) == 0.0, timeout=20)
    assert held >= 2.0
    text = said.read_text()
    assert text.count(f"vacuum horizon held back past 1 s by pid {pid} (nightly-export,") == 1
    assert text.count("vacuum horizon no longer held back past 1 s") == 1
    # From cron, each run is a process of its own: it tells at every run, and its work is
    # done all the same.
    assert cron.returncode == 0, cron.stderr
    assert f"held back past 1 s by pid {pid} (nightly-export" in cron.stderr


def test_the_cleaner_prunes_nothing_while_it_is_held_and_catches_up_after(
    pg_url: str, queue: str
) -> None:
    with contextlib.closing(connect(pg_url)) as c, txqueue.transaction(c):
        txqueue.enqueue_many(c, [Task("n", queue=queue) for _ in range(30)])
    finished = "state = 'succeeded', finished_at = now() - interval '2 days'"
    execute(pg_url, f"UPDATE txqueue_tasks SET {finished} WHERE queue = %s", (queue,))
    cleaner = txqueue.Cleaner(database_url=pg_url, amqp_url=None, vacuum_horizon_warn=1)
    with held_open(pg_url, "nightly-export"):
        time.sleep(1.2)  # the hold's age is counted from its transaction's start
        report = cleaner.run_once()
        assert (report.pruned, report.prune_deferred) == (0, True)
        assert "pruned 0 (deferred: the vacuum horizon is held back)" in report.summary()
        assert count(pg_url) == 30
    report = cleaner.run_once()
    assert (report.pruned, report.prune_deferred) == (30, False)
    assert count(pg_url) == 0


def test_status_always_has_a_line_about_it(pg_url: str, sqlite_url: str) -> None:
    env = {"TXQUEUE_DATABASE_URL": pg_url}
    assert "\nvacuum horizon: not held back" in cli("status", env=env).stdout
    doc = json.loads(cli("status", "--json", env=env).stdout)["vacuum_horizon"]
    assert doc["holder"] is None and doc["seconds"] == 0 and not doc["past_threshold"]
    with held_open(pg_url, "month-end") as pid:
        time.sleep(1.1)
        text = cli("status", env=env).stdout
        past = cli("status", env={**env, "TXQUEUE_VACUUM_HORIZON_WARN": "1"}).stdout
        doc = json.loads(cli("status", "--json", env=env).stdout)["vacuum_horizon"]
        one_line_error(
            cli("status", env={**env, "TXQUEUE_VACUUM_HORIZON_WARN": "soon"}),
            "TXQUEUE_VACUUM_HORIZON_WARN",
            "'soon'",
        )
    line = f"vacuum horizon: held back by pid {pid} (month-end, user postgres, from 127.0.0.1, "
    line += "idle in transaction, open since "
    assert line in text and "past" not in text.split("vacuum horizon:")[1]
    assert line in past and "; past 1 s: dead rows pile up and claims slow down" in past
    assert doc["holder"]["pid"] == pid and doc["holder"]["kind"] == HOLDER_BACKEND
    assert doc["seconds"] >= 1 and doc["threshold_s"] == 300 and not doc["past_threshold"]
    assert doc["description"].startswith(f"pid {pid} (month-end,")
    check(doc, "vacuum_horizon", "status.vacuum_horizon", set())  # as the CLI reference says
    sqlite = cli("status", env={"TXQUEUE_DATABASE_URL": sqlite_url})
    assert "vacuum horizon: not held back" in sqlite.stdout


def test_the_dashboard_names_the_culprit_past_the_threshold(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TXQUEUE_VACUUM_HORIZON_WARN", "1")
    with serving(dashboard.create_app(pg_url)) as web:
        assert 'class="alarm"' not in web.get("/").text
        with held_open(pg_url, HOSTILE) as pid:
            assert 'class="alarm"' not in web.get("/").text  # not yet a second
            time.sleep(1.1)
            page = web.get("/").text
        after = web.get("/").text
    banner = page.split('<p class="alarm" role="alert">')[1].split("</p>")[0]
    assert f"by pid {pid} (" in banner and "idle in transaction, open since" in banner
    assert HOSTILE not in page and "&lt;script&gt;" in banner  # a name is shown, never run
    assert 'class="alarm"' not in after


def test_the_banner_in_a_browser(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"no {CHROMIUM}: apt-get install chromium (bash tests/run does)")
    monkeypatch.setenv("TXQUEUE_VACUUM_HORIZON_WARN", "1")
    with (
        serving(dashboard.create_app(pg_url)) as web,
        held_open(pg_url, HOSTILE) as pid,
        sync_playwright() as pw,
    ):
        time.sleep(1.1)
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            page.goto(f"{web.base_url}/")
            banner = page.get_by_role("alert")
            assert banner.is_visible()
            text = banner.text_content() or ""
            assert f"pid {pid} ({HOSTILE}," in text and "idle in transaction" in text
            assert page.title() == "Overview · txqueue"  # the name's script did not run
        finally:
            browser.close()


# --- on a private cluster ----------------------------------------------------------------

# A standby needs at least its primary's values of these: both get the same.
SETTINGS = {
    "max_prepared_transactions": "2",
    "wal_level": "logical",
    "max_wal_senders": "4",
    "max_replication_slots": "4",
    "fsync": "off",
}
WATCHER = "txqueue_watcher"  # a role without pg_monitor


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with cluster(**SETTINGS) as primary:
        with psycopg.connect(primary.url(), autocommit=True) as c:
            c.execute("CREATE DATABASE elsewhere")
            c.execute(f"CREATE ROLE {WATCHER} LOGIN")
        yield primary


def reading(url: str) -> HorizonHolder | None:
    with contextlib.closing(POSTGRES.connect(url)) as c:
        return POSTGRES.vacuum_horizon(c)


def test_a_prepared_transaction_is_named_and_one_of_another_database_is_not(
    server: Server,
) -> None:
    with psycopg.connect(server.url(), autocommit=True) as c:
        c.execute("BEGIN")
        c.execute("SELECT pg_current_xact_id()")
        c.execute("PREPARE TRANSACTION 'txqueue-test-pay-17'")
        try:
            held = reading(server.url())
            assert reading(server.url("elsewhere")) is None
        finally:
            c.execute("ROLLBACK PREPARED 'txqueue-test-pay-17'")
    assert held is not None
    assert (held.kind, held.name, held.user) == (HOLDER_PREPARED, "txqueue-test-pay-17", "postgres")
    assert held.since is not None and held.seconds is not None and held.seconds < 60
    assert reading(server.url()) is None


def test_sessions_of_another_database_do_not_hold_this_one(server: Server) -> None:
    with held_open(server.url("elsewhere")):
        assert reading(server.url()) is None
        assert reading(server.url("elsewhere")) is not None


def test_the_transaction_whose_xid_it_is_comes_before_the_snapshots_that_see_it(
    server: Server,
) -> None:
    with psycopg.connect(server.url(), autocommit=True, application_name="reader") as reader:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")  # begun first, no snapshot
        with held_open(server.url(), "writer") as writer:
            reader.execute("SELECT 1")  # its snapshot's xmin: the writer's xid
            held = reading(server.url())
        reader.execute("ROLLBACK")
    assert held is not None and (held.pid, held.application) == (writer, "writer")


def test_without_pg_monitor_another_users_session_is_named_without_details(
    server: Server,
) -> None:
    with held_open(server.url(), "nightly-export") as pid:
        hidden = reading(server.url(user=WATCHER))
        with psycopg.connect(server.url(), autocommit=True) as c:
            c.execute(f"GRANT pg_monitor TO {WATCHER}")
            try:
                shown = reading(server.url(user=WATCHER))
            finally:
                c.execute(f"REVOKE pg_monitor FROM {WATCHER}")
    assert hidden is not None
    assert (hidden.pid, hidden.application, hidden.user) == (pid, "nightly-export", "postgres")
    assert (hidden.state, hidden.since, hidden.seconds, hidden.client) == (None,) * 4
    assert hidden.backend_type is None
    watch = Watch(300, logger=None, clock=iter([0.0, 400.0]).__next__)
    watch.see(hidden)
    assert watch.see(hidden).describe() == (
        f"pid {pid} (nightly-export, user postgres, details hidden without pg_monitor, "
        "holding xmin for at least 6 min)"
    )
    assert shown is not None and shown.state == "idle in transaction"
    assert shown.seconds is not None and shown.since is not None


def test_slots_without_an_xmin_hold_nothing(server: Server) -> None:
    with psycopg.connect(server.url(), autocommit=True) as c:
        # Reserves WAL, holds no xmin; and a logical slot's catalog_xmin holds only the
        # system catalogs, not txqueue's table.
        c.execute("SELECT pg_create_physical_replication_slot('txqueue_wal', true)")
        c.execute("SELECT pg_create_logical_replication_slot('txqueue_cdc', 'test_decoding')")
        try:
            (catalog_xmin,) = c.execute(
                "SELECT catalog_xmin FROM pg_replication_slots WHERE slot_name = 'txqueue_cdc'"
            ).fetchone() or (None,)
            c.execute("SELECT pg_current_xact_id()")  # so that the catalog_xmin is behind
            assert catalog_xmin is not None
            assert reading(server.url()) is None
        finally:
            c.execute("SELECT pg_drop_replication_slot('txqueue_wal')")
            c.execute("SELECT pg_drop_replication_slot('txqueue_cdc')")


def test_a_standbys_feedback_then_its_slot_left_behind(server: Server) -> None:
    feedback = {**SETTINGS, "hot_standby_feedback": "on", "wal_receiver_status_interval": "1"}
    url = server.url()
    with (
        psycopg.connect(url, autocommit=True) as primary,
        standby(server, "standby1", **feedback) as replica,
    ):

        def fed_back() -> bool:
            sql = "SELECT backend_xmin FROM pg_stat_activity WHERE backend_type = 'walsender'"
            row = primary.execute(sql).fetchone()
            return row is not None and row[0] is not None

        wait_until(fed_back, timeout=30, every=0.2)
        # An idle standby's feedback is the newest xmin, which holds nothing back.
        assert reading(url) is None
        query = psycopg.connect(replica.url(), autocommit=True)
        try:
            # A long report on the standby: its snapshot, fed back to the primary.
            query.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            query.execute("SELECT count(*) FROM pg_class")
            primary.execute("SELECT pg_current_xact_id()")  # a transaction past it

            def walsender() -> bool:
                held = reading(url)
                return held is not None and held.backend_type == "walsender"

            wait_until(walsender, timeout=30, every=0.2)
            held = reading(url)
            assert held is not None and (held.kind, held.application) == (
                HOLDER_BACKEND,
                "standby1",
            )
            assert held.seconds is None  # a walsender's xmin carries no time
            # Without pg_monitor a walsender shows only as a session of no database.
            hidden = reading(server.url(user=WATCHER))
            assert hidden is not None and hidden.pid == held.pid
            # Then through a slot: the feedback goes there, and stays when the standby
            # goes away.
            primary.execute("SELECT pg_create_physical_replication_slot('standby1')")
            with psycopg.connect(replica.url(), autocommit=True) as c:
                c.execute("ALTER SYSTEM SET primary_slot_name = 'standby1'")
                c.execute("SELECT pg_reload_conf()")

            def slot(active: bool) -> bool:
                held = reading(url)
                return held is not None and held.kind == HOLDER_SLOT and held.active is active

            wait_until(lambda: slot(True), timeout=30, every=0.2)
            replica.stop()  # the report still running: the slot keeps its xmin
        finally:
            query.close()
        try:
            assert slot(False)
            left = reading(url)
            assert left is not None and left.name == "standby1" and left.pid is None
            watch = Watch(300, logger=None, clock=iter([0.0, 400.0]).__next__)
            assert watch.see(left).at_least
            assert watch.see(replace(left, xid_age=left.xid_age + 1)).describe() == (
                "replication slot 'standby1' (inactive) holding xmin for at least 6 min"
            )
        finally:
            primary.execute("SELECT pg_drop_replication_slot('standby1')")
    assert reading(url) is None
