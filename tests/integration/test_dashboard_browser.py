"""The dashboard in a real browser (Debian's Chromium, driven by Playwright): from the
overview to a failed task, Retry pressed, and the task seen to run."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, Playwright, sync_playwright

import txqueue
from txqueue import Task
from txqueue.dashboard import app as dashboard
from txqueue.testing import run_tasks

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


@contextmanager
def browsing(pw: Playwright) -> Iterator[tuple[Page, list[str]]]:
    """A page in Chromium, and the errors its console shows, which a test expects none of."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"no {CHROMIUM}: apt-get install chromium (bash tests/run does)")
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
    try:
        page = browser.new_page(viewport={"width": 1100, "height": 760})
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        yield page, problems
    finally:
        browser.close()


def keep(shots: Path) -> None:
    """Copy the screenshots where TXQUEUE_SCREENSHOTS says: how docs/images/ is made."""
    folder = os.environ.get("TXQUEUE_SCREENSHOTS")
    if folder:
        for shot in shots.iterdir():
            shutil.copy(shot, Path(folder) / f"dashboard-{shot.name}")


def test_a_failed_task_is_found_retried_and_run_from_the_browser(
    pg_url: str, queue: str, tmp_path: Path
) -> None:
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
        with browsing(pw) as (page, problems):
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

            flow = txqueue.Workflow("checkout")
            paid = flow.add(Task("charge", {"order": 18}, queue=queue), name="pay")
            flow.add(Task("charge", {"order": 19}, queue=queue), after=[paid], name="confirm")
            with closing(connect(pg_url, autocommit=True)) as c:
                txqueue.enqueue_workflow(c, flow)
            page.goto(f"{web.base_url}/tasks/{paid.id}")
            page.get_by_role("link", name="its workflow").click()
            page.wait_for_url(f"**/workflows/{flow.id}")
            reload_until(page, "main", "succeeded", timeout=15)
            reload_until(page, "h1", "succeeded", timeout=15)
            page.screenshot(path=shots / "workflow.png", full_page=True)
            page.get_by_role("link", name="Workers").click()
            page.wait_for_selector(f"text={worker.worker_id}")
            page.screenshot(path=shots / "workers.png", full_page=True)
            assert problems == []
    keep(shots)


def test_tasks_are_ticked_and_retried_all_matching_cancelled_and_a_dead_letter_group_discarded(
    pg_url: str, queue: str, tmp_path: Path
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with closing(connect(pg_url, autocommit=True)) as c:
        failed = [txqueue.enqueue(c, Task("charge", {"n": n}, queue=queue)) for n in range(3)]
        txqueue.enqueue(c, Task("mail", {"n": 9}, queue=queue))
        waiting = [txqueue.enqueue(c, Task("later", n, queue=queue, delay=600)) for n in range(4)]
    registry = txqueue.Registry()

    @registry.task("charge", queue=queue, max_attempts=1)
    def charge(n: int) -> None:
        raise ValueError(f"card declined {n}")

    @registry.task("mail", queue=queue, max_attempts=1)
    def mail(n: int) -> None:
        raise TimeoutError("smtp")

    run_tasks(registry, pg_url)
    with (
        closing(connect(pg_url, autocommit=True)) as c,
        serving(dashboard.create_app(pg_url)) as web,
        sync_playwright() as pw,
        browsing(pw) as (page, problems),
    ):
        page.goto(f"{web.base_url}/tasks?state=failed&queue={queue}&name=charge")
        for task_id in failed[:2]:
            page.get_by_label(f"select {task_id}").check()
        page.screenshot(path=shots / "tasks-bulk.png", full_page=True)
        page.get_by_role("button", name="Retry selected").click()
        page.wait_for_selector("text=Retried 2 tasks: they are pending again.")
        states = {i: txqueue.get_task(c, i).state for i in failed}
        assert states == {failed[0]: "pending", failed[1]: "pending", failed[2]: "failed"}

        page.goto(f"{web.base_url}/tasks?state=pending&queue={queue}")
        assert "all 6 matching" in (page.text_content("form.bulk") or "")
        page.get_by_label("all 6 matching").check()
        page.get_by_role("button", name="Cancel selected").click()
        page.wait_for_selector("text=Cancelled 6 tasks (running ones are asked to stop).")
        assert {txqueue.get_task(c, i).state for i in [*waiting, *failed[:2]]} == {"cancelled"}

        page.get_by_role("link", name="Dead letters").click()
        row = page.locator("tr", has=page.locator("td:text-is('builtins.TimeoutError')"))
        assert "smtp" in (row.text_content() or "")
        page.screenshot(path=shots / "dead-letters.png", full_page=True)
        row.get_by_role("button", name="Discard").click()
        page.wait_for_selector("text=Discarded the group's 1 tasks.")
        assert "builtins.TimeoutError" not in (page.text_content("main") or "")
        assert "builtins.ValueError" in (page.text_content("main") or "")  # the other group
        assert problems == []
    keep(shots)


def test_a_schedule_is_created_and_paused_beside_one_declared_in_code(
    pg_url: str, queue: str, tmp_path: Path
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    registry = txqueue.Registry()

    @registry.periodic("*/15 * * * *", queue=queue, name="refresh_rates")
    def refresh_rates() -> None: ...

    worker = txqueue.Worker(registry, database_url=pg_url, amqp_url=None, queues=[queue])
    with (
        running(worker),
        closing(connect(pg_url, autocommit=True)) as c,
        serving(dashboard.create_app(pg_url)) as web,
        sync_playwright() as pw,
        browsing(pw) as (page, problems),
    ):
        page.goto(f"{web.base_url}/")
        page.get_by_role("link", name="Schedules").click()
        reload_until(page, "main", "refresh_rates")  # written by the worker as it starts
        page.get_by_label("name", exact=True).fill("nightly_report")
        page.get_by_label("task", exact=True).fill("report")
        page.get_by_label("queue", exact=True).fill(queue)
        page.get_by_label("cron", exact=True).fill("0 3 * * *")
        page.get_by_label("time zone", exact=True).fill("Europe/Paris")
        page.get_by_label("payload", exact=True).fill('{"kind": "daily"}')
        page.get_by_role("button", name="Create").click()
        page.wait_for_selector("text=Schedule created")
        made = txqueue.get_schedule(c, "nightly_report")
        assert (made.source, made.payload, made.paused) == ("runtime", {"kind": "daily"}, False)

        row = page.locator("tr", has=page.locator("td:text-is('nightly_report')"))
        row.get_by_role("button", name="Pause").click()
        page.wait_for_selector("text=Paused: the schedule enqueues nothing")
        assert txqueue.get_schedule(c, "nightly_report").paused
        code = page.locator("tr", has=page.locator("td:text-is('refresh_rates')"))
        code.get_by_role("button", name="Pause").click()
        page.wait_for_selector("text=Paused: the schedule enqueues nothing")
        assert txqueue.get_schedule(c, "refresh_rates").paused
        assert code.get_by_role("link", name="Change").count() == 0  # changed in code only
        page.screenshot(path=shots / "schedules.png", full_page=True)
        assert problems == []
    keep(shots)


def test_several_databases_are_browsed_from_their_first_page(
    shards: dict[str, str], queue: str, tmp_path: Path
) -> None:
    """Each database's row leads to its pages, styled from the same sheet (a wrong path
    would be a console error), and the switch in the header leads back."""
    given = {**shards, "gone": "postgresql://postgres@127.0.0.1:1/nothing"}
    for n, name in enumerate(shards):
        with closing(connect(shards[name], autocommit=True)) as c:
            txqueue.enqueue_many(c, [Task("charge", i, queue=queue) for i in range(n + 1)])
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with (
        serving(dashboard.create_app(databases=given)) as web,
        sync_playwright() as pw,
        browsing(pw) as (page, problems),
    ):
        page.goto(f"{web.base_url}/")
        page.wait_for_selector("text=out of reach")
        page.screenshot(path=shots / "databases.png", full_page=True)
        page.get_by_role("link", name="us", exact=True).first.click()
        page.wait_for_url("**/db/us/")
        row = page.locator("tr", has=page.locator(f"a:text-is('{queue}')"))
        assert (row.locator("td.n").first.text_content() or "").strip() == "2"
        page.get_by_role("link", name="Tasks").click()
        page.wait_for_url("**/db/us/tasks")
        assert page.locator("td.id a").count() == 2
        page.get_by_role("link", name="All databases").click()
        page.wait_for_url(f"{web.base_url}/")
        background = page.evaluate(
            "getComputedStyle(document.querySelector('header')).backgroundColor"
        )
        assert background == "rgb(31, 41, 51)"
        assert problems == []
    keep(shots)
