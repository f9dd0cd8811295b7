"""The vacuum horizon, end to end: the worker's gauge and warning, the cleaner's loop and
cron run (real processes), `txqueue status`, and the dashboard's banner (and in Chromium)."""

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
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

import txqueue
from txqueue import Task
from txqueue.dashboard import app as dashboard
from txqueue.errors import StoreError
from txqueue.store import PostgresStore
from txqueue.store.records import HOLDER_BACKEND, HorizonHolder
from txqueue.worker import leases

from .helpers import (
    connect,
    count,
    free_port,
    held_open,
    http_get,
    running,
    samples,
    value,
    wait_until,
)
from .test_cli import ROOT, cli, one_line_error
from .test_dashboard import HOSTILE, serving
from .test_dashboard_browser import CHROMIUM, FLAGS

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
    assert "idle in transaction, open since" in said[0] and "README" in said[0]
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
        pytest.fail(f"no {CHROMIUM}: apt-get install chromium (.ci/run does)")
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
