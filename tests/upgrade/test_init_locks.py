"""``txqueue init`` under the previous release's workers, at the moment the rehearsal once
caught by chance on a loaded machine: PostgreSQL ended init, or an old worker's statement,
as a deadlock."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from .conftest import NEW, OLD, Releases

pytestmark = pytest.mark.xdist_group("upgrade")

WAIT = 60.0

# 0.2.0's scheduler fires a slot in one transaction: the schedule's row first (its last slot
# moved forward), then the slot's task.
SCHEDULE = (
    "INSERT INTO txqueue_schedules (name, task, queue, cron, timezone, last_slot)"
    " VALUES ('tick', 'upgrade.tick', 'work', '* * * * *', 'UTC', now())"
)
FIRE = "UPDATE txqueue_schedules SET last_slot = now() WHERE name = 'tick'"
SLOT_TASK = (
    "INSERT INTO txqueue_tasks (id, name, queue) VALUES (gen_random_uuid(), 'upgrade.tick', 'work')"
)
WAITS_FOR_SCHEDULES = (
    "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'txqueue_schedules'::regclass"
)


def _waits_for_schedules(db_url: str, init: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + WAIT
    with psycopg.connect(db_url, autocommit=True) as conn:
        while conn.execute(WAITS_FOR_SCHEDULES).fetchone() == (0,):
            assert init.poll() is None, f"init exited {init.returncode} before waiting"
            assert time.monotonic() < deadline, f"init did not reach migration 16 in {WAIT}s"
            time.sleep(0.05)


def test_init_holds_no_earlier_migrations_lock_while_it_waits_for_the_next(
    releases: Releases, previous: Path
) -> None:
    """An old worker fires a schedule while init waits for the schedules table (migration
    16): the worker's slot task is written (init holds nothing on the task table by then,
    migrations 10 to 15 being committed), and init goes on once the worker commits."""
    db = releases.db_url
    releases.run(OLD, "txqueue", "init")
    with psycopg.connect(db) as scheduler:
        scheduler.execute(SCHEDULE)
        scheduler.commit()
        scheduler.execute(FIRE)
        init = releases.start(NEW, "init", "txqueue", "init")
        _waits_for_schedules(db, init)
        scheduler.execute(SLOT_TASK)
        scheduler.commit()
    assert init.wait(WAIT) == 0, releases.log(init)
    assert "applied migrations 10 to " in releases.log(init)
