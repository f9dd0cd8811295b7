"""The slots tasks are written to (docs/explanation/storage.md): moving finished tasks out
of the slots no longer current, truncating those left empty, and turning to an empty one when the
current slot's period is over."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from ..records import SLOT_BATCH, SlotsKept
from .connection import QUERIES, PgConnection, errors

LIVE = (0, 1, 2, 3)
_TABLES = {
    -2: "txqueue_tasks_legacy",
    0: "txqueue_tasks_s0",
    1: "txqueue_tasks_s1",
    2: "txqueue_tasks_s2",
    3: "txqueue_tasks_s3",
}


def _statement(name: str, slot: int) -> sql.Composed:
    return sql.SQL(QUERIES[name]).format(table=sql.Identifier(_TABLES[slot]))


class Slots:
    def keep_slots(self, conn: PgConnection, period: float) -> SlotsKept | None:
        """One round of slot upkeep, or None when another process is doing it now."""
        with errors("slot upkeep"), conn.transaction():
            conn.execute(QUERIES["upkeep_idle_limit"])
            row = conn.execute(QUERIES["slots_turn"]).fetchone()
            if row is None or not row[0]:
                return None
            current, age = _one(conn, "current_slot")
            finished = pending = 0
            truncated = []
            sizes: dict[int, int] = dict(conn.execute(QUERIES["slot_sizes"]).fetchall())
            # Each reclaimed slot's lock is held until the commit: one truncation a round.
            for slot in (s for s, pages in sizes.items() if pages and s != current):
                params = {"slot": slot, "limit": SLOT_BATCH}
                finished += conn.execute(QUERIES["move_finished"], params).rowcount
                running, _ = _one(conn, "slot_holds", params)
                if running:
                    continue  # reclaimed once its tasks end; nothing new is written to it
                pending += conn.execute(QUERIES["move_pending"], params).rowcount
                if self._truncate(conn, slot):
                    truncated.append(slot)
                    sizes[slot] = 0
                    break
            rotated = stuck = False
            if age >= period:
                ring = LIVE[LIVE.index(current) + 1 :] + LIVE[: LIVE.index(current)]
                empty = [s for s in ring if not sizes.get(s)]
                if empty:
                    current, rotated = empty[0], True
                    conn.execute(QUERIES["rotate"], {"slot": current})
                else:
                    stuck = age >= 2 * period
        return SlotsKept(current, rotated, finished, pending, tuple(truncated), stuck)

    def _truncate(self, conn: PgConnection, slot: int) -> bool:
        """Empty the slot's table if it holds no task, unless that means waiting for a lock
        more than a few milliseconds (someone reading or writing it: tried again next round)."""
        try:
            with conn.transaction():
                conn.execute(QUERIES["lock_timeout"])
                conn.execute(_statement("lock_slot", slot))
                _, holds = _one(conn, "slot_holds", {"slot": slot})
                if holds:  # moved out in a batch too small, or written to since
                    raise _Busy  # rolled back to the savepoint: the lock released at once
                conn.execute(_statement("truncate_slot", slot))
                return True
        except (psycopg.errors.LockNotAvailable, _Busy):
            # When the rollback itself fails (the connection lost) psycopg lets _Busy through;
            # the next statement then raises the connection's error, which errors() reports.
            return False


class _Busy(Exception):
    """Not psycopg.Rollback: that one escapes a failed rollback as itself, not as an error."""


def _one(conn: PgConnection, name: str, params: dict[str, int] | None = None) -> tuple[Any, Any]:
    row = conn.execute(QUERIES[name], params).fetchone()
    assert row is not None
    return row[0], row[1]
