"""The worker's statements: claims, the commit check for a wake-up the claim missed,
transitions (outcomes, release, give-back), leases and cancellation flags."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from ...core import lifecycle
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
    Inserted,
    Outcome,
    Poll,
    Polled,
    Why,
)
from ..transitions import ended, to_claim
from .connection import QUERIES, Caller, PgConnection, as_uuid, errors, retrying_moved


def _claimed(rows: Iterable[tuple[Any, ...]]) -> list[Claimed]:
    # The payload comes as text: json.loads of a str skips psycopg's per-value bytes path.
    return [
        Claimed(i, q, n, json.loads(p), a, m, t, w, c, s, lim, late)
        for i, q, n, p, a, m, t, w, c, s, lim, late in rows
    ]


def _claim_params(worker_id: str, defaults: ClaimDefaults) -> dict[str, Any]:
    return {
        "worker_id": worker_id,
        "names": defaults.names,
        "defaults": defaults.per_name_json,
        "default_timeout": defaults.timeout,
        "default_max_attempts": defaults.max_attempts,
    }


def _one_status(conn: PgConnection, xid: str) -> str | None:
    try:
        row = conn.execute(QUERIES["xact_status"], ([xid],)).fetchone()
    except psycopg.errors.InvalidParameterValue:
        return None
    return None if row is None else row[1]


class Claims:
    """A worker's statements: claims, the commit check for a wake-up the claim missed,
    outcomes, leases, release and cancellation flags."""

    _apply: Callable[[Caller, Sequence[Transition]], Applied]  # Transitions'
    is_connection_error: Callable[[BaseException], bool]  # Connection's

    def claim_ids(
        self,
        conn: PgConnection,
        ids: Sequence[uuid.UUID],
        worker_id: str,
        defaults: ClaimDefaults,
    ) -> list[Claimed]:
        """Claim the given tasks that are pending, ripe and known to this worker (named in
        ``defaults``), in one statement."""
        params = {"ids": list(ids), **_claim_params(worker_id, defaults)}
        query = QUERIES["claim_ids_keyed" if defaults.keyed else "claim_ids"]
        with errors("claim"):
            return _claimed(retrying_moved(conn, lambda: conn.execute(query, params, prepare=True)))

    def claim_ripe(self, conn: PgConnection, poll: Poll, lookahead: int = 0) -> Polled:
        """The idle poll: claim up to ``limit`` ripe tasks of a queue that this worker knows,
        best priority first, skipping rows other workers hold, as many as the queue's
        settings (and, with ``defaults.keyed``, the task keys) leave room for; looking at
        ``lookahead`` candidates more, past the tasks of keys at their limit."""
        queue, limit, worker_id, defaults = poll
        params = {"queue": queue, "limit": limit, **_claim_params(worker_id, defaults)}
        query = QUERIES["claim_ripe"]
        if defaults.keyed:
            params["lookahead"] = lookahead
            query = QUERIES["claim_ripe_keyed"]
        with errors("poll"):
            rows = retrying_moved(conn, lambda: conn.execute(query, params, prepare=True))
        held, retry_in = rows[0][-2:]
        return Polled(_claimed(r[:-2] for r in rows if r[0] is not None), held, retry_in)

    def claim_fair(self, conn: PgConnection, poll: Poll, after: str = "") -> Polled:
        """The idle poll of a fair-share queue: up to ``limit`` ripe tasks, taken from its
        keys in turn, starting after the key ``after`` (``Polled.after`` of the poll before,
        "" at the start of a round), as many as its settings and the task keys leave room
        for."""
        queue, limit, worker_id, defaults = poll
        params = {"queue": queue, "limit": limit, "after": after}
        params.update(_claim_params(worker_id, defaults))
        with errors("poll"):
            rows = retrying_moved(
                conn, lambda: conn.execute(QUERIES["claim_fair"], params, prepare=True)
            )
        held, retry_in, next_after = rows[0][-3:]
        claimed = _claimed(r[:-3] for r in rows if r[0] is not None)
        return Polled(claimed, held, retry_in, next_after or "")

    def committed(self, conn: PgConnection, xids: Sequence[str]) -> set[str]:
        """Of the transaction ids ``xids``, those committed."""
        with errors("claim check"):
            try:
                rows = conn.execute(QUERIES["xact_status"], (sorted(set(xids)),)).fetchall()
            except psycopg.errors.InvalidParameterValue:  # one from the future: see below
                rows = [(x, _one_status(conn, x)) for x in set(xids)]
        return {x for x, status in rows if status == "committed"}

    def why_unclaimed(
        self, conn: PgConnection, items: Sequence[tuple[uuid.UUID, str | None]]
    ) -> dict[uuid.UUID, Why]:
        """For ids a claim did not get: the enqueuing transaction's status, then the row.

        Two statements in one pipelined round trip, status first: a commit that lands
        between them then shows as a visible row, never as "committed but absent".
        """
        xids = sorted({x for _, x in items if x is not None and x.isdigit()})
        ids = [i for i, _ in items]
        with errors("claim check"):
            try:
                with conn.pipeline():
                    status_cur = conn.execute(QUERIES["xact_status"], (xids,))
                    rows_cur = conn.execute(QUERIES["rows_by_id"], (ids,))
                status = dict(status_cur.fetchall())
            except psycopg.errors.InvalidParameterValue:
                # A transaction id from the future (a forged or foreign message) fails the
                # whole statement: ask one by one, the bad ones reading as unknown.
                status = {x: _one_status(conn, x) for x in xids}
                rows_cur = conn.execute(QUERIES["rows_by_id"], (ids,))
            rows = {r[0]: r[1:] for r in rows_cur.fetchall()}
        out = {}
        for task_id, xid in items:
            state, run_at, ripe, name, held = rows.get(task_id, (None, None, False, None, False))
            out[task_id] = Why(
                status.get(xid) if xid else None, state, run_at, bool(ripe), name, held
            )
        return out

    def apply(
        self,
        conn: PgConnection,
        transitions: Sequence[Transition],
        steps: bool = False,
        claim_next: ClaimNext | None = None,
    ) -> Applied:
        """Apply ``transitions`` in one statement, each fenced (``lifecycle.Fence``);
        returns the state each applied one wrote (one fenced out is missing). A workflow's
        step they end that a child waits for is applied again in a transaction of its own,
        with its children's changes: the statement, seeing the row, leaves it. ``steps``
        (the claims said some are steps): that transaction at once, saving the statement
        that would find them; so too for moves that enqueue tasks (a compensation).
        ``claim_next``: that transaction claims the steps it readied, as it allows."""
        with errors("change task state"):
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                return self._apply(conn, transitions)
            if steps or any(t.enqueues for t in transitions):
                return self._following(conn, transitions, claim_next)
            if not transitions:
                return Applied()
            params = apply_params(transitions, alone=True)
            query = QUERIES["apply"]
            rows = retrying_moved(conn, lambda: conn.execute(query, params, prepare=True))
            applied = Applied()
            deferred = {as_uuid(row[0]) for row in rows if row[1] is None}
            for c in (changed(row) for row in rows if row[1] is not None):
                applied[c.id] = c.state
                if c.queue is not None:
                    applied.ready.append((c.queue, Inserted(c.id, True, c.xid)))
            if deferred:
                later = [t for t in transitions if t.id in deferred]
                followed = self._following(conn, later, claim_next)
                applied.update(followed)
                applied.ready += followed.ready
                applied.claimed, applied.claim_error = followed.claimed, followed.claim_error
                applied.enqueued.update(followed.enqueued)
            return applied

    def _following(
        self,
        conn: PgConnection,
        transitions: Sequence[Transition],
        claim_next: ClaimNext | None,
    ) -> Applied:
        for attempt in range(3):
            try:
                with conn.transaction():
                    applied = self._apply(conn, transitions)
                    if claim_next is not None:
                        self._claim_readied(conn, applied, claim_next)
                    return applied
            except psycopg.errors.SerializationFailure:
                # A child this moved was moved first by another writer (cancelled by
                # hand): all again, from what that one committed.
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _claim_readied(self, conn: PgConnection, applied: Applied, then: ClaimNext) -> None:
        """Claim, last in the transaction that readied them, the steps of ``then.queues``
        (the queues' and keys' locks come after every row lock, as in any claim), in a
        savepoint: a claim refused leaves the steps to their wake-ups and the transitions
        written."""
        if not (ids := to_claim(applied, then)):
            return
        try:
            with conn.transaction():
                applied.claimed = self.claim_ids(conn, ids, then.worker_id, then.defaults)
        except StoreError as exc:
            if self.is_connection_error(exc):
                raise
            applied.claim_error = exc

    def _write(self, conn: Caller, transitions: Sequence[Transition]) -> list[Changed]:
        # A caller's connection too: a cancel by hand applies in the application's transaction.
        if not transitions:
            return []
        rows = conn.execute(QUERIES["apply"], apply_params(transitions), prepare=True)
        return [changed(row) for row in rows]

    def outcomes_landed(
        self, conn: PgConnection, outcomes: Sequence[Outcome]
    ) -> dict[uuid.UUID, str]:
        """Of ``outcomes`` that a retried ``record_outcomes`` found fenced out, those an
        earlier try wrote after all, its reply lost with the connection; with the state each
        left."""
        doc = json.dumps(
            [{"id": str(o.id), "attempt": o.attempt, "worker_id": o.worker_id} for o in outcomes]
        )
        params = {"outcomes": doc, "lease_expired": LEASE_EXPIRED}
        with errors("check outcomes"):
            rows = conn.execute(QUERIES["outcomes_landed"], params).fetchall()
        return dict(rows)

    @contextmanager
    def atomic(self, conn: PgConnection) -> Iterator[None]:
        """The transaction of an atomic task, on a connection of the worker's: the handler's
        work and the task's success commit together. psycopg refuses a ``commit()`` or
        ``rollback()`` of the handler's inside it. A failed statement of the handler's is
        raised as it is, its work rolled back; a failed BEGIN or COMMIT as a StoreError."""
        handler = False
        try:
            with conn.transaction():
                handler = True
                yield
                handler = False
        except psycopg.Error:
            if handler:
                raise
            with errors("atomic task"):
                raise

    def record_atomic(self, conn: PgConnection, outcome: Outcome) -> Applied:
        """Write an atomic task's success in its open transaction, fenced as every outcome is;
        without its id if the fence failed (the lease was lost): the caller must roll back."""
        return self.apply(conn, [ended(outcome)])

    def extend_leases(
        self,
        conn: PgConnection,
        worker_id: str,
        leases: Sequence[tuple[uuid.UUID, int, float]],
    ) -> set[uuid.UUID]:
        """Heartbeat: push back the lease of each (id, attempt, timeout) this worker still holds."""
        if not leases:
            return set()
        ids, attempts, timeouts = (list(col) for col in zip(*leases, strict=True))
        with errors("heartbeat"):
            params = {
                "ids": ids,
                "attempts": attempts,
                "timeouts": timeouts,
                "worker_id": worker_id,
            }
            rows = conn.execute(QUERIES["extend_leases"], params).fetchall()
        return {r[0] for r in rows}

    def write_progress(
        self, conn: PgConnection, worker_id: str, reports: Sequence[tuple[uuid.UUID, int, str]]
    ) -> set[uuid.UUID]:
        """Each (id, attempt, progress) of a task this worker still runs, in one statement;
        the ids written (a row another transaction holds is skipped)."""
        if not reports:
            return set()
        ids, attempts, texts = (list(col) for col in zip(*reports, strict=True))
        params = {"ids": ids, "attempts": attempts, "progress": texts, "worker_id": worker_id}
        with errors("progress"):
            return {r[0] for r in conn.execute(QUERIES["write_progress"], params).fetchall()}

    def lock_running(
        self, conn: PgConnection, worker_id: str, held: Sequence[tuple[uuid.UUID, int]]
    ) -> list[Running]:
        """The (id, attempt) tasks ``worker_id`` still runs, locked until the commit."""
        ids, attempts = (list(col) for col in zip(*held, strict=True))
        params = {
            "ids": ids,
            "attempts": attempts,
            "worker_id": worker_id,
            "default_max_attempts": DEFAULT_MAX_ATTEMPTS,
        }
        return [running(r) for r in conn.execute(QUERIES["lock_running"], params).fetchall()]

    def cancel_requested(
        self, conn: PgConnection, worker_id: str, ids: Sequence[uuid.UUID]
    ) -> set[uuid.UUID]:
        """Which of this worker's running tasks someone asked to cancel."""
        with errors("cancel check"):
            return {
                r[0]
                for r in conn.execute(
                    QUERIES["cancel_requested"], (list(ids), worker_id)
                ).fetchall()
            }


FINISHED = list(lifecycle.FINISHED)


def apply_params(transitions: Sequence[Transition], alone: bool = False) -> dict[str, Any]:
    """The parameters of ``apply`` (the asyncio store's too); ``alone``: in autocommit,
    with no transaction for a step's follow-up."""
    return {"transitions": transitions_doc(transitions), "finished": FINISHED, "alone": alone}


def transitions_doc(transitions: Sequence[Transition]) -> str:
    """The parameter of ``apply``: the transitions as a JSON array of records, each with
    only what it sets (the statement reads a key left out as NULL: the outcome write, the
    worker's hot path, sends about half the text). A result goes as its JSON text, cast by
    the statement: not parsed here to be written out again."""
    docs = []
    for t in transitions:
        fence = t.fence
        doc: dict[str, Any] = {
            "id": str(t.id),
            "from": fence.state,
            "to": t.to,
            "move": t.move,
            "by": t.by,
        }
        if fence.attempt is not None:
            doc["attempt"] = fence.attempt
        if fence.worker_id is not None:
            doc["worker_id"] = fence.worker_id
        if t.if_cancel_requested is not None:
            doc["if_cancelled"] = t.if_cancel_requested
        if t.result is not None:
            doc["result"] = t.result
        if t.error is not None:
            doc["error"] = t.error
        reason = t.reason()
        if reason is not None:
            doc["reason"] = reason
        if t.inputs is not None:
            doc["inputs"] = t.inputs
        if t.run_in is not None:
            doc["run_in"] = t.run_in
        if t.lease_ends:
            doc["lease_ends"] = True
        if t.undoes_claim:
            doc["undoes_claim"] = True
        if t.requests_cancel:
            doc["requests_cancel"] = True
        if t.progress is not None:
            doc["progress"] = t.progress
        if t.wait_key is not None:
            doc["wait_key"] = t.wait_key
        docs.append(doc)
    return json.dumps(docs)


def changed(row: Sequence[Any]) -> Changed:
    """A row of ``apply`` (the asyncio store's too)."""
    task_id, state, step, queue, xid, edges, signals = row
    freed = None if edges is None else tuple((as_uuid(c), policy) for c, policy in edges)
    return Changed(as_uuid(task_id), state, step, queue, xid, freed, signals)


def running(row: Sequence[Any]) -> Running:
    """A row of ``lock_running`` or ``lock_expired``."""
    return Running(*row)
