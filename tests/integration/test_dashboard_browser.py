"""The dashboard in a real browser (Debian's Chromium, driven by Playwright): from the
overview to a failed task, Retry pressed, and the task seen to run."""

from __future__ import annotations

import os
import shutil
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, sync_playwright

import txqueue
from txqueue import Task
from txqueue.dashboard import app as dashboard

from .helpers import connect, running
from .test_dashboard import HOSTILE, serving

CHROMIUM = "/usr/bin/chromium"
# As root, without a sandbox; and nothing reaching out to the network on its own.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def reload_until(page: Page, selector: str, text: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in (page.text_content(selector) or ""):
        assert time.monotonic() < deadline, f"{selector} never showed {text!r}"
        time.sleep(0.2)
        page.reload()


def test_a_failed_task_is_found_retried_and_run_from_the_browser(
    pg_url: str, queue: str, tmp_path: Path
) -> None:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"no {CHROMIUM}: apt-get install chromium (bash tests/run does)")
    fixed = threading.Event()
    registry = txqueue.Registry()

    @registry.task("charge", queue=queue, max_attempts=1)
    def charge(payload: Any) -> str:
        if not fixed.is_set():
            raise ValueError("card declined")
        return "charged"

    worker = txqueue.Worker(registry, database_url=pg_url, amqp_url=None, poll_interval=0.1)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with (
        running(worker),
        serving(dashboard.create_app(pg_url)) as web,
        sync_playwright() as pw,
    ):
        with closing(connect(pg_url, autocommit=True)) as c:
            txqueue.enqueue(c, Task("charge", {"order": 17, "note": HOSTILE}, queue=queue))
            txqueue.enqueue_many(c, [Task("charge", i, queue=queue, delay=600) for i in range(3)])
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 760})
            problems: list[str] = []
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.goto(f"{web.base_url}/")
            row = page.locator("tr", has=page.locator(f"a:text-is('{queue}')"))
            reload_until(page, f"tr:has(a:text-is('{queue}')) td.failed", "1")
            page.screenshot(path=shots / "overview.png", full_page=True)
            row.locator("td.failed a").click()
            page.wait_for_url("**/tasks?*state=failed*")
            page.locator("td.id a").first.click()
            page.wait_for_selector("text=ValueError: card declined")
            assert page.title().startswith("charge ")  # the payload's script did not run
            assert HOSTILE in (page.text_content("pre") or "")
            page.screenshot(path=shots / "task.png", full_page=True)
            fixed.set()
            page.get_by_role("button", name="Retry").click()
            page.wait_for_selector("text=Retried: the task is pending again.")
            reload_until(page, "h1 .state", "succeeded")
            assert '"charged"' in (page.text_content("main") or "")
            assert problems == []
        finally:
            browser.close()
    keep = os.environ.get("TXQUEUE_SCREENSHOTS")
    if keep:  # how the docs' picture is made (docs/images/)
        for shot in shots.iterdir():
            shutil.copy(shot, Path(keep) / f"dashboard-{shot.name}")
