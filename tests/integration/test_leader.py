"""One active cleaner among many: `txqueue cleaner --loop` may run on every host; a lease
row (which holds through PgBouncer, as an advisory lock would not) lets one work at a time,
and a standby takes over within an interval of the active one's death."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import closing

import pytest

from txqueue.store import for_url

from .helpers import wait_until
from .pgbouncer import pgbouncer, through
from .test_cli import ROOT, TXQUEUE

pytestmark = pytest.mark.xdist_group("test_leader")

INTERVAL = 2.0  # a lease of 2 s, renewed each second: room for a loaded machine
PASS = "cleaner: re-notified"


@pytest.fixture(scope="module")
def bouncer(servers: tuple[str, str]) -> Iterator[int]:
    with pgbouncer(servers[0]) as port:
        yield port


def test_a_lease_is_refused_while_held_and_taken_once_lapsed_or_resigned(db_url: str) -> None:
    store = for_url(db_url)
    with closing(store.connect(db_url)) as conn:
        first = store.lead(conn, "role", "a", 2)
        assert first.holder == "a" and 0 < first.left <= 2
        other = store.lead(conn, "role", "b", 2)
        assert other.holder == "a" and 0 < other.left <= 2
        assert store.lead(conn, "role", "a", 2).holder == "a"  # renewed
        time.sleep(2.1)
        assert store.lead(conn, "role", "b", 5).holder == "b"  # lapsed: taken over
        store.resign(conn, "role", "a")  # not a's to give up
        assert store.lead(conn, "role", "a", 5).holder == "b"
        store.resign(conn, "role", "b")
        assert store.lead(conn, "role", "a", 5).holder == "a"
        assert store.lead(conn, "other", "b", 5).holder == "b"  # roles are separate


class Loop:
    """A `txqueue cleaner --loop` process and what it has printed so far."""

    def __init__(self, url: str | None, **env_given: str) -> None:
        """Of the database ``url``, or (None) of those its environment gives."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")}
        env.update(env_given)
        given = [] if url is None else ["--database-url", url]
        self.proc = subprocess.Popen(
            [*TXQUEUE, "cleaner", "--loop", "--interval", f"{INTERVAL:g}s", *given],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def passes(self) -> int:
        return sum(PASS in line for line in self.lines)

    def finish(self) -> str:
        """Wait for the stopped process's last words; all it printed."""
        self.proc.wait(20)
        self._reader.join(20)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return "".join(self.lines)


def holder(pg_url: str, *, lapsed_too: bool = False) -> int | None:
    """The pid of the cleaner holding the lease, if one does and (unless ``lapsed_too``)
    it has not lapsed."""
    live = "" if lapsed_too else " AND expires_at > now()"
    with closing(for_url(pg_url).connect(pg_url)) as conn:
        row = conn.execute(
            f"SELECT holder FROM txqueue_leaders WHERE role = 'cleaner'{live}"
        ).fetchone()
    return int(row[0].split(":")[1]) if row else None


@pytest.mark.parametrize("pooled", [False, True], ids=["direct", "pgbouncer"])
def test_of_three_cleaner_loops_one_works_and_a_standby_takes_over_within_an_interval(
    pg_url: str, pooled: bool, request: pytest.FixtureRequest
) -> None:
    url = through(pg_url, request.getfixturevalue("bouncer")) if pooled else pg_url
    loops = {loop.proc.pid: loop for loop in (Loop(url) for _ in range(3))}
    try:
        wait_until(lambda: holder(pg_url) in loops, timeout=30)
        active = loops[holder(pg_url) or 0]
        wait_until(lambda: active.passes() >= 2, timeout=30)
        assert holder(pg_url) == active.proc.pid
        assert [loop.passes() for loop in loops.values() if loop is not active] == [0, 0]

        # Killed: nothing resigns; the lease lapses within an interval, and a standby has it.
        active.proc.kill()
        killed = time.monotonic()
        wait_until(lambda: holder(pg_url) not in (None, active.proc.pid), timeout=10, every=0.02)
        took_over = time.monotonic() - killed
        successor = loops[holder(pg_url) or 0]
        wait_until(lambda: successor.passes() >= 1, timeout=10)
        assert took_over < INTERVAL + 1.0, took_over

        # Stopped: it gives the lease up as it goes (a cleaner started next would take it
        # at once), and the last one takes over at its next look.
        successor.proc.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        (last,) = [loop for loop in loops.values() if loop not in (active, successor)]
        assert successor.proc.wait(10) == 0
        assert holder(pg_url, lapsed_too=True) in (None, last.proc.pid)
        wait_until(lambda: holder(pg_url) == last.proc.pid, timeout=10, every=0.02)
        assert time.monotonic() - stopped < INTERVAL + 1.0
        wait_until(lambda: last.passes() >= 1, timeout=10)
    finally:
        for loop in loops.values():
            if loop.proc.poll() is None:
                loop.proc.send_signal(signal.SIGTERM)
        said = {pid: loop.finish() for pid, loop in loops.items()}
    assert not [text for text in said.values() if "Traceback" in text], said
    assert "standing by while" in said[last.proc.pid]
