"""ctx.progress on each store: stored while the task runs, at most once a second however
often the handler reports, kept with the outcome, and shown by get_task, wait, the CLI
and the dashboard."""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import closing

import txqueue
from txqueue import Task, dashboard
from txqueue.testing import run_tasks

from .helpers import connect, running
from .test_cli import cli
from .test_dashboard import serving

STEPS = 600


def _worker(db_url: str, queue: str) -> txqueue.Worker:
    registry = txqueue.Registry()

    # A one-second lease: the lease keeper passes every third of a second, so only the
    # throttle keeps its writes to one a second.
    @registry.task("copy", queue=queue, context=True, timeout=1)
    def copy(ctx: txqueue.TaskContext, payload: dict[str, float]) -> None:
        # About three seconds of reports in a tight loop.
        for i in range(1, STEPS + 1):
            ctx.progress(i, STEPS, f"file {i}")
            time.sleep(payload["pause"])

    @registry.task("quiet", queue=queue)
    def quiet(payload: object) -> None:
        return None

    return txqueue.Worker(registry, database_url=db_url, concurrency=2)


def _enqueue(db_url: str, task: Task) -> uuid.UUID:
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        return txqueue.enqueue(c, task)


def test_progress_is_written_at_most_once_a_second_and_kept_with_the_outcome(
    db_url: str, queue: str
) -> None:
    stored: set[float] = set()  # each distinct progress read back while it ran
    told: list[txqueue.Progress] = []
    stop = threading.Event()

    def watch(task_id: uuid.UUID) -> None:
        with closing(connect(db_url, autocommit=True)) as c:
            while not stop.is_set():
                info = txqueue.get_task(c, task_id)
                if info.progress is not None and info.state == "running":
                    stored.add(info.progress.at.timestamp())
                time.sleep(0.02)

    with running(_worker(db_url, queue)):
        task_id = _enqueue(db_url, Task("copy", {"pause": 0.005}, queue=queue))
        watcher = threading.Thread(target=watch, args=(task_id,))
        watcher.start()
        try:
            started = time.monotonic()
            info = txqueue.wait(db_url, task_id, timeout=30, on_progress=told.append)
            took = time.monotonic() - started
        finally:
            stop.set()
            watcher.join()
    assert info.state == "succeeded"
    # The last report, kept with the outcome, whenever the last write was.
    assert info.progress is not None
    assert (info.progress.done, info.progress.total) == (STEPS, STEPS)
    assert info.progress.describe() == f"{STEPS}/{STEPS} (100%): file {STEPS}"
    # Seen while it ran, and written about once a second: not once per report.
    assert 2 <= len(stored) <= took + 2, (len(stored), took)
    # The waiter was told each new one it read, in order, the last one included.
    assert told and told[-1] == info.progress
    assert [p.done for p in told] == sorted({p.done for p in told})


def test_a_task_that_says_nothing_has_no_progress(db_url: str, queue: str) -> None:
    with running(_worker(db_url, queue)):
        task_id = _enqueue(db_url, Task("quiet", queue=queue))
        told: list[txqueue.Progress] = []
        info = txqueue.wait(db_url, task_id, timeout=10, on_progress=told.append)
    assert (info.state, info.progress, told) == ("succeeded", None, [])


def test_show_list_and_the_dashboard_show_the_progress(db_url: str, queue: str) -> None:
    with running(_worker(db_url, queue)):
        done = _enqueue(db_url, Task("copy", {"pause": 0.0}, queue=queue))
        quiet = _enqueue(db_url, Task("quiet", queue=queue))
        txqueue.wait(db_url, done, timeout=30)
        txqueue.wait(db_url, quiet, timeout=30)
    shown = f"{STEPS}/{STEPS} (100%): file {STEPS}"
    show = cli("show", str(done), "--database-url", db_url)
    assert show.returncode == 0, show.stderr
    assert shown in show.stdout
    listed = cli("list", "--queue", queue, "--database-url", db_url)
    assert listed.returncode == 0, listed.stderr
    assert "progress" in listed.stdout and shown[:20] in listed.stdout
    with serving(dashboard.create_app(db_url)) as web:
        page = web.get(f"/tasks/{done}").text
    assert f'<progress value="{STEPS}" max="{STEPS}">' in page and shown in page


def test_the_wait_command_prints_each_progress_on_stderr_when_asked(
    db_url: str, queue: str
) -> None:
    with running(_worker(db_url, queue)):
        task_id = _enqueue(db_url, Task("copy", {"pause": 0.003}, queue=queue))
        waited = cli("wait", str(task_id), "--progress", "--database-url", db_url)
    assert waited.returncode == 0, waited.stderr
    lines = waited.stderr.splitlines()
    assert lines and all(line.startswith("progress: ") for line in lines), lines
    assert lines[-1] == f"progress: {STEPS}/{STEPS} (100%): file {STEPS}"
    assert waited.stdout.strip() == "null"  # the result, as without --progress


def test_the_inline_runner_keeps_the_last_progress_with_the_outcome(
    db_url: str, queue: str
) -> None:
    registry = txqueue.Registry()

    @registry.task("steps", queue=queue, context=True)
    def steps(ctx: txqueue.TaskContext, n: int) -> None:
        for i in range(1, n + 1):
            ctx.progress(i, n)

    with closing(connect(db_url)) as c, txqueue.transaction(c):
        task_id = steps.enqueue(c, 40)
    [ran] = run_tasks(registry, db_url)
    assert ran.state == "succeeded"
    with closing(connect(db_url, autocommit=True)) as c:
        info = txqueue.get_task(c, task_id)
    assert info.progress is not None and (info.progress.done, info.progress.total) == (40, 40)
