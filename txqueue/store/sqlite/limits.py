"""Flow control in a SQLite claim: what a queue's settings and the task keys leave room
for, counted in the claim's write transaction (exact: no other writer runs meanwhile), by
the rules of schema.sql's txqueue_room, txqueue_key_rooms and txqueue_rate_room."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...core.limits import task_key
from .connection import QUERIES


@dataclass(slots=True)
class Room:
    """What a limit leaves a claim: ``left`` more starts; if it holds some back, why and
    (a rate limit) in how many seconds one more may start; and, for a rate limit, the
    bucket its starts are logged in, for ``period`` seconds."""

    left: int
    held: str | None = None
    retry_in: float | None = None
    bucket: str | None = None
    period: float = 0.0


def _rate(
    conn: sqlite3.Connection, room: Room, bucket: str, limit: int, period: float, now: float
) -> None:
    """Narrow ``room`` to the rate limit's: ``limit`` starts in any ``period``, paced
    ``period/limit`` apart (a few at once where that is under 10 ms)."""
    room.bucket, room.period = bucket, period
    since = {"bucket": bucket, "since": now - period}
    conn.execute(QUERIES["forget_starts"], since)
    started, oldest, newest, last_batch = conn.execute(QUERIES["starts_since"], since).fetchone()
    spacing = period / limit
    next_at = now if newest is None else max(now, newest + last_batch * spacing)
    paced = 0 if next_at > now else max(1, int(0.01 / spacing))
    left = max(min(limit - started, paced), 0)
    if left < room.left:
        room.left, room.held = left, "rate"
        full = started + left >= limit
        room.retry_in = max(
            next_at - now + left * spacing,
            (now if oldest is None else oldest) + period - now if full else 0.0,
            0.0,
        )


def queue_room(
    conn: sqlite3.Connection, queue: str, wanted: int, now: float, fair: bool = False
) -> Room:
    """The room a queue's settings leave for ``wanted`` starts, to a fair-share poll
    (``fair``) or another claim: a claim of the other kind gets none."""
    room = Room(wanted)
    row = conn.execute(QUERIES["room_settings"], (queue,)).fetchone()
    if row is None:
        return Room(0, "plain") if fair else room
    paused, rate_limit, rate_period, concurrency, fair_share = row
    if bool(fair_share) != fair:
        return Room(0, "plain" if fair else "fair")
    if paused:
        return Room(0, "paused")
    if concurrency is not None:
        running = conn.execute(QUERIES["running_in_queue"], (queue,)).fetchone()[0]
        if concurrency - running < room.left:
            room.left, room.held = max(concurrency - running, 0), "concurrency"
    if rate_limit is not None:
        _rate(conn, room, f"queue:{queue}", rate_limit, rate_period, now)
    return room


@dataclass
class Gates:
    """A claim's limits, for its candidates taken best first: ``admit`` says whether the
    next one may start, and counts it if so."""

    conn: sqlite3.Connection
    now: float
    per_name: Mapping[str, Mapping[str, Any]]
    queues: dict[str, Room] = field(default_factory=dict)
    keys: dict[tuple[str, str], Room] = field(default_factory=dict)
    key_held: bool = False
    fair: bool = False  # a fair-share poll's

    def plan(self, candidates: Sequence[tuple[str, str, Any]], limit: int | None = None) -> None:
        """Read the room of every queue and key among (queue, name, payload) candidates,
        of which the claim wants ``limit`` at most."""
        for queue, n in Counter(c[0] for c in candidates).items():
            asked = n if limit is None else min(n, limit)
            self.queues[queue] = queue_room(self.conn, queue, asked, self.now, self.fair)
        wanted: Counter[tuple[str, str]] = Counter()
        specs: dict[tuple[str, str], Mapping[str, Any]] = {}
        for _, name, payload in candidates:
            for kind, spec in self._specs(name):
                kind_key = (kind, task_key(spec["arg"], spec["default"], name, payload))
                wanted[kind_key] += 1
                specs[kind_key] = spec
        for (kind, key), n in wanted.items():
            spec, room = specs[kind, key], Room(n)
            if kind == "concurrency":
                running = self.conn.execute(QUERIES["running_with_key"], (key,)).fetchone()[0]
                room.left = max(min(n, spec["limit"] - running), 0)
            else:
                _rate(self.conn, room, f"key:{key}", spec["limit"], spec["period"], self.now)
            self.keys[kind, key] = room

    def admit(self, queue: str, name: str, payload: Any) -> tuple[bool, str | None]:
        """Whether the candidate may start now, and its concurrency key."""
        keys = self._keys(name, payload)
        rooms = [self.queues[queue], *(self.keys[k] for k in keys)]
        concurrency_key = next((key for kind, key in keys if kind == "concurrency"), None)
        if any(r.left == 0 for r in rooms):
            self.key_held |= self.queues[queue].left > 0
            return False, concurrency_key
        for room in rooms:
            room.left -= 1
        return True, concurrency_key

    def starts(self, queue: str, name: str, payload: Any) -> list[tuple[str, float, float]]:
        """The log entries of an admitted candidate's start: its queue's, its rate key's."""
        rooms = [self.queues[queue], *(self.keys[k] for k in self._keys(name, payload))]
        return [(r.bucket, self.now, self.now + r.period) for r in rooms if r.bucket]

    def key_retry(self) -> float | None:
        waits = [r.retry_in for r in self.keys.values() if r.retry_in is not None]
        return min(waits) if waits else None

    def _keys(self, name: str, payload: Any) -> list[tuple[str, str]]:
        return [
            (kind, task_key(spec["arg"], spec["default"], name, payload))
            for kind, spec in self._specs(name)
        ]

    def _specs(self, name: str) -> list[tuple[str, Mapping[str, Any]]]:
        mine = self.per_name.get(name, {})
        return [(kind, mine[kind]) for kind in ("concurrency", "rate") if kind in mine]
