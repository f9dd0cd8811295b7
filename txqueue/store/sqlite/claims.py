"""The worker's statements: claims, the look at a wake-up the claim missed, transitions
(outcomes, release, give-back), leases and cancellation flags."""

from __future__ import annotations

import itertools
import json
import sqlite3
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ...core.failures import LEASE_EXPIRED
from ...core.lifecycle import Running, Transition
from ...core.task import DEFAULT_MAX_ATTEMPTS
from ...errors import StoreError
from ..records import (
    Applied,
    Changed,
    ClaimDefaults,
    Claimed,
    ClaimNext,
    Outcome,
    Poll,
    Polled,
    Why,
)
from ..transitions import ended, to_claim
from .connection import QUERIES, Clock, _ids, _immediate, _time, errors
from .limits import Gates, Room, queue_room
from .rows import apply_params, changed, merged, running, taken

Pick = Callable[[sqlite3.Connection, dict[str, Any]], Iterable[Any]]


def _query(name: str) -> Pick:
    return lambda conn, params: conn.execute(QUERIES[name], params)


def _polled(claimed: list[Claimed], gates: Gates, queue: str) -> Polled:
    room = gates.queues.get(queue)
    if room is not None and room.held is not None:
        return Polled(claimed, room.held, room.retry_in)
    if gates.key_held:
        return Polled(claimed, "key", gates.key_retry())
    return Polled(claimed)


class Claims:
    clock: Clock
    _apply: Callable[[sqlite3.Connection, Sequence[Transition]], Applied]  # Transitions'
    is_connection_error: Callable[[BaseException], bool]  # Connection's

    def _claim(
        self,
        conn: sqlite3.Connection,
        action: str,
        pick: Pick,
        params: dict[str, Any],
        worker_id: str,
        defaults: ClaimDefaults,
        limit: int | None = None,
        fair: bool = False,
    ) -> tuple[list[Claimed], Gates]:
        """Claim what ``pick`` finds, in its order, as far as the limits allow (and
        ``limit``)."""
        claimed: list[Claimed] = []
        updates: list[tuple[Any, ...]] = []
        starts: Counter[tuple[str, float, float]] = Counter()  # a log row per bucket
        with errors(action), _immediate(conn):
            now = self.clock.now()
            params = {**params, "now": now, "defaults": defaults.per_name_json, "taken": "[]"}
            picked = [(row, json.loads(row[3])) for row in pick(conn, params)]
            gates = Gates(conn, now, defaults.per_name, fair=fair)
            gates.plan([(row[1], row[2], payload) for row, payload in picked], limit)
            for row, payload in picked:
                _, queue, name = row[:3]
                if limit is not None and len(claimed) == limit:
                    break
                admitted, concurrency_key = gates.admit(queue, name, payload)
                if not admitted:
                    continue
                starts.update(gates.starts(queue, name, payload))
                update, claim = taken(row, payload, now, worker_id, defaults, concurrency_key)
                updates.append(update)
                claimed.append(claim)
            conn.executemany(QUERIES["claim"], updates)
            conn.executemany(QUERIES["log_start"], [(*k, n) for k, n in starts.items()])
        return claimed, gates

    def claim_ids(
        self,
        conn: sqlite3.Connection,
        ids: Sequence[uuid.UUID],
        worker_id: str,
        defaults: ClaimDefaults,
    ) -> list[Claimed]:
        """Claim the given tasks that are pending, ripe and known to this worker (named in
        ``defaults``), as many as their queues' settings and keys leave room for, best
        priority first, in one transaction."""
        params = {"ids": _ids(ids)}
        return self._claim(conn, "claim", _query("pick_ids"), params, worker_id, defaults)[0]

    def claim_ripe(self, conn: sqlite3.Connection, poll: Poll, lookahead: int = 0) -> Polled:
        """The idle poll: claim up to ``limit`` ripe tasks of a queue that this worker knows,
        best priority first, as many as the queue's settings and the task keys leave room
        for; looking at ``lookahead`` candidates more, past the tasks of keys at their
        limit."""
        queue, limit, worker_id, defaults = poll
        params = {"queue": queue, "limit": limit + (lookahead if defaults.keyed else 0)}
        claimed, gates = self._claim(
            conn, "poll", _query("pick_ripe"), params, worker_id, defaults, limit
        )
        return _polled(claimed, gates, queue)

    def claim_fair(self, conn: sqlite3.Connection, poll: Poll, after: str = "") -> Polled:
        """The idle poll of a fair-share queue: up to ``limit`` ripe tasks, taken from its
        keys in turn, starting after the key ``after`` (``Polled.after`` of the poll before,
        "" at the start of a round), as many as its settings and the task keys leave room
        for. The turns are PostgreSQL's (its queries.sql, claim_fair)."""
        queue, limit, worker_id, defaults = poll
        room = Room(0)
        keys: list[str] = []

        def pick(conn: sqlite3.Connection, params: dict[str, Any]) -> list[Any]:
            nonlocal room
            # The round is as long as the queue's room, as on PostgreSQL: sized by the
            # worker's free threads instead, a limited queue's round would end at every poll
            # and start over at its first key.
            room = queue_room(conn, queue, limit, params["now"], fair=True)
            if room.left == 0:
                return []
            found = conn.execute(
                QUERIES["next_keys"], {**params, "after": after, "limit": room.left}
            )
            keys[:] = [k for (k,) in found]
            ends = len(keys) < room.left
            share = -(-room.left // max(len(keys) + ends, 1))
            turns = [
                conn.execute(QUERIES["pick_key"], {**params, "key": k, "limit": share}).fetchall()
                for k in keys
            ]
            taken = [row[0] for turn in turns for row in turn]
            rest = {**params, "taken": json.dumps(taken), "limit": max(room.left - len(taken), 0)}
            turns.append(conn.execute(QUERIES["pick_ripe"], rest).fetchall())
            # Each turn's first, in the keys' order, then each one's second, ...
            return [row for rank in itertools.zip_longest(*turns) for row in rank if row]

        params = {"queue": queue, "limit": limit}
        claimed, gates = self._claim(conn, "poll", pick, params, worker_id, defaults, limit, True)
        # A poll with no room asked nothing of the keys: the round stays where it was.
        turn = after if room.left == 0 else "" if len(keys) < room.left else keys[-1]
        if room.held is not None:
            return Polled(claimed, room.held, room.retry_in, turn)
        return _polled(claimed, gates, queue)._replace(after=turn)

    def committed(self, conn: sqlite3.Connection, xids: Sequence[str]) -> set[str]:
        """None: SQLite keeps no transaction status (its wake-ups carry no xid)."""
        return set()

    def why_unclaimed(
        self, conn: sqlite3.Connection, items: Sequence[tuple[uuid.UUID, str | None]]
    ) -> dict[uuid.UUID, Why]:
        """The rows of ids a claim did not get. SQLite keeps no transaction status, so an
        invisible row reads as not committed yet, and the worker waits for it a while."""
        with errors("claim check"):
            rows = conn.execute(QUERIES["rows_by_id"], (_ids(i for i, _ in items),)).fetchall()
        now = self.clock.now()
        found = {uuid.UUID(r[0]): (r[1], r[2], r[3], bool(r[4])) for r in rows}
        out = {}
        for task_id, _ in items:
            state, run_at, name, held = found.get(task_id, (None, None, None, False))
            ripe = run_at is not None and run_at <= now
            out[task_id] = Why(None, state, _time(run_at), ripe, name, held)
        return out

    # --- outcomes and leases -----------------------------------------------------------

    def apply(
        self,
        conn: sqlite3.Connection,
        transitions: Sequence[Transition],
        steps: bool = False,
        claim_next: ClaimNext | None = None,
    ) -> Applied:
        """Apply ``transitions`` in one transaction, each fenced (``lifecycle.Fence``);
        returns the state each applied one wrote (one fenced out is missing), its workflow
        steps' children's included. ``steps``: unused, every write is one transaction.
        ``claim_next``: that transaction claims the steps it readied, as it allows."""
        if not transitions:
            return Applied()
        with errors("change task state"), _immediate(conn):
            applied = self._apply(conn, transitions)
            if claim_next is not None and (ids := to_claim(applied, claim_next)):
                try:  # in a savepoint of its own (``_immediate`` nested)
                    applied.claimed = self.claim_ids(
                        conn, ids, claim_next.worker_id, claim_next.defaults
                    )
                except StoreError as exc:
                    if self.is_connection_error(exc):
                        raise
                    applied.claim_error = exc  # the steps are woken; the rest stands
            return applied

    def _write(self, conn: sqlite3.Connection, transitions: Sequence[Transition]) -> list[Changed]:
        now = self.clock.now()
        out = []
        for t in transitions:
            params = apply_params(t, now)
            if t.inputs is not None:
                found = conn.execute(QUERIES["payload"], (str(t.id),)).fetchone()
                params["payload"] = merged(found[0] if found else None, t.inputs)
            row = conn.execute(QUERIES["apply"], params).fetchone()
            if row is not None:
                out.append(changed(t.id, row))
        return out

    def outcomes_landed(
        self, conn: sqlite3.Connection, outcomes: Sequence[Outcome]
    ) -> dict[uuid.UUID, str]:
        """Of ``outcomes`` that a retried ``record_outcomes`` found fenced out, those an
        earlier try wrote after all; with the state each left."""
        landed = {}
        with errors("check outcomes"):
            for o in outcomes:
                params = {
                    "id": str(o.id),
                    "attempt": o.attempt,
                    "worker_id": o.worker_id,
                    "lease_expired": LEASE_EXPIRED,
                }
                row = conn.execute(QUERIES["outcome_landed"], params).fetchone()
                if row is not None:
                    landed[o.id] = str(row[0])
        return landed

    @contextmanager
    def atomic(self, conn: sqlite3.Connection) -> Iterator[None]:
        """The transaction of an atomic task, on a connection of the worker's: the handler's
        work and the task's success commit together. The write lock is taken first, as for
        every write of txqueue's (a deferred one could not always be upgraded), and held
        until the commit: while an atomic task runs, the database's other writers wait."""
        handler = False
        try:
            with _immediate(conn):
                handler = True
                yield
                handler = False
        except sqlite3.Error:
            if handler:  # the handler's own statement: raised as it is, its work rolled back
                raise
            with errors("atomic task"):
                raise

    def record_atomic(self, conn: sqlite3.Connection, outcome: Outcome) -> Applied:
        """Write an atomic task's success in its open transaction, fenced as every outcome
        is; without its id if the fence failed (the lease was lost): the caller must roll
        back."""
        if not conn.in_transaction:
            raise StoreError(
                "atomic task: the handler ended the transaction on ctx.conn itself; "
                "its success was not written"
            )
        with errors("record outcome"):
            return self._apply(conn, [ended(outcome)])

    def extend_leases(
        self,
        conn: sqlite3.Connection,
        worker_id: str,
        leases: Sequence[tuple[uuid.UUID, int, float]],
    ) -> set[uuid.UUID]:
        """Heartbeat: push back the lease of each (id, attempt, timeout) this worker still
        holds."""
        if not leases:
            return set()
        held = set()
        with errors("heartbeat"), _immediate(conn):
            now = self.clock.now()
            for task_id, attempt, timeout in leases:
                params = (now + timeout, now, str(task_id), attempt, worker_id)
                if conn.execute(QUERIES["extend_lease"], params).fetchone() is not None:
                    held.add(task_id)
        return held

    def write_progress(
        self,
        conn: sqlite3.Connection,
        worker_id: str,
        reports: Sequence[tuple[uuid.UUID, int, str]],
    ) -> set[uuid.UUID]:
        """Each (id, attempt, progress) of a task this worker still runs; the ids written."""
        written = set()
        with errors("progress"), _immediate(conn):
            for task_id, attempt, text in reports:
                params = (text, str(task_id), attempt, worker_id)
                if conn.execute(QUERIES["write_progress"], params).fetchone() is not None:
                    written.add(task_id)
        return written

    def lock_running(
        self, conn: sqlite3.Connection, worker_id: str, held: Sequence[tuple[uuid.UUID, int]]
    ) -> list[Running]:
        """The (id, attempt) tasks ``worker_id`` still runs, in the caller's write
        transaction."""
        now = self.clock.now()
        out = []
        for task_id, attempt in held:
            params = {
                "id": str(task_id),
                "attempt": attempt,
                "worker_id": worker_id,
                "default_max_attempts": DEFAULT_MAX_ATTEMPTS,
            }
            row = conn.execute(QUERIES["lock_running"], params).fetchone()
            if row is not None:
                out.append(running(row, now))
        return out

    def cancel_requested(
        self, conn: sqlite3.Connection, worker_id: str, ids: Sequence[uuid.UUID]
    ) -> set[uuid.UUID]:
        """Which of this worker's running tasks someone asked to cancel."""
        params = (_ids(ids), worker_id)
        with errors("cancel check"):
            return {uuid.UUID(r[0]) for r in conn.execute(QUERIES["cancel_requested"], params)}
