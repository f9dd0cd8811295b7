"""Recovery: a dead worker's task is taken back by the workers themselves once its lease
ends, whichever process held the cleaner's lease, and with no cleaner at all."""

from __future__ import annotations

import time
from contextlib import closing
from typing import Any

import pytest

import txqueue
from txqueue import Event, Task
from txqueue.cleaner.recovery import RECOVER_EVERY

from ..integration.helpers import connect, count, rows, wait_until
from .conftest import Workers, summarize

LEADER = "SELECT holder FROM txqueue_leaders WHERE role = 'cleaner'"


def scalar(db_url: str, sql: str) -> Any:
    with closing(connect(db_url)) as c:
        row = c.execute(sql).fetchone()
    return None if row is None else row[0]


@pytest.mark.parametrize("cleaner", [(), ("--no-cleaner",)], ids=["cleaner-leader", "no-cleaner"])
def test_a_dead_workers_task_starts_again_within_its_lease_whatever_the_cleaner(
    db_url: str, queue: str, workers: Workers, cleaner: tuple[str, ...]
) -> None:
    """The task's lease (2 s here), not the cleaner's, bounds its recovery: the killed worker
    held the lease of the cleaner's passes, which run every 60 s (or in no process at all),
    and the survivor takes the task back within its lease and ``RECOVER_EVERY``."""
    workers.serving(db_url, queue)
    args = ("--poll-interval", "0.05", *cleaner)
    first = workers.start(*args)
    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue(c, Task("record", {"first_sleep": 60}, queue=queue))
    wait_until(lambda: bool(workers.runs()), timeout=20)
    if not cleaner:
        wait_until(lambda: f":{first.pid}:" in str(scalar(db_url, LEADER)), timeout=20)
    survivor = workers.start(*args)
    wait_until(lambda: scalar(db_url, "SELECT count(*) FROM txqueue_workers") == 2, timeout=20)
    killed_at = time.time()
    workers.kill(first)
    wait_until(lambda: count(db_url, "state = 'succeeded'") == 1, timeout=30)
    [(_, _, pid, started)] = [s for s in workers.starts() if s[1] == 2]
    assert pid == survivor.pid
    # The lease had at most 2 s left, the survivor looks every RECOVER_EVERY (2 s), and its
    # wake-up and claim take a moment: 6 s leave room for a loaded machine, and are ten
    # times less than the cleaner's interval.
    assert started - killed_at < 2 + RECOVER_EVERY + 2
    kind = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    summarize(
        f"recovery ({kind}, {'no cleaner' if cleaner else 'the cleaner lease holder killed'}): "
        f"a task with a 2 s lease started again {started - killed_at:.1f}s after its worker's "
        "SIGKILL"
    )
    # Said once the look's wake-ups are sent: the task may start (from a poll) first.
    said = "recovered the tasks of workers that died: retried 1"
    wait_until(lambda: said in workers.output(survivor), timeout=10)
    [row] = rows(db_url)
    [event] = [e for e in row["events"] if Event.of_json(e).move == "recovered"]
    assert f":{survivor.pid}:" in event["by"] and f":{first.pid}:" in event["worker"]
