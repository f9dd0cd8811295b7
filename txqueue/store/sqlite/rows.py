"""SQLite's rows as txqueue's records: a claim's, a transition's parameters, a running
task's (the sync and the asyncio store's)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from ...core import lifecycle
from ...core.lifecycle import Running, Transition
from ..records import Changed, ClaimDefaults, Claimed
from .connection import _at


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


_FINISHED = json.dumps(list(lifecycle.FINISHED))


def apply_params(t: Transition, now: float) -> dict[str, Any]:
    """The parameters of ``apply`` for one transition (the asyncio store's too)."""
    return {
        "id": str(t.id),
        "from": t.fence.state,
        "attempt": t.fence.attempt,
        "worker_id": t.fence.worker_id,
        "to": t.to,
        "if_cancelled": t.if_cancel_requested,
        "result": t.result,
        "progress": t.progress,
        "error": None if t.error is None else json.dumps(t.error),
        "run_in": t.run_in,
        "lease_ends": t.lease_ends,
        "undoes_claim": int(t.undoes_claim),
        "requests_cancel": t.requests_cancel,
        "move": t.move,
        "by": t.by,
        "reason": t.reason(),
        "wait_key": t.wait_key,
        "payload": None,  # a step readied: its arguments with its inputs (Claims._write)
        "finished": _FINISHED,
        "now": now,
    }


def changed(task_id: uuid.UUID, row: Sequence[Any]) -> Changed:
    """A row of ``apply`` (the asyncio store's too): state, step, queue readied, and
    whether it ended a child."""
    state, step, queue, signals = row
    return Changed(task_id, state, step, queue, signals=bool(signals))


def merged(payload: str | None, inputs: str) -> str:
    """A readied step's arguments with its inputs (JSON text both): SQLite's json_patch
    would drop an input whose value is null."""
    return json.dumps({**(json.loads(payload) if payload else {}), **json.loads(inputs)})


def taken(
    row: Sequence[Any],
    payload: Any,
    now: float,
    worker_id: str,
    defaults: ClaimDefaults,
    concurrency_key: str | None,
) -> tuple[tuple[Any, ...], Claimed]:
    """A picked row the limits admitted: the ``claim`` statement's parameters, and the
    claim, its unset options filled in from the worker's registry."""
    task_id, queue, name, _, attempts, max_attempts, timeout, ripe, *more = row
    trace, step, time_limit, start_by, run_at, expires_in, resumed = more
    mine = defaults.per_name.get(name, {})
    timeout = _first(timeout, mine.get("timeout"), defaults.timeout)
    max_attempts = _first(max_attempts, mine.get("max_attempts"), defaults.max_attempts)
    policy = mine.get("on_lease_expired")
    if time_limit is None:
        time_limit = mine.get("time_limit")
    expires = mine.get("expires") if expires_in is None else expires_in
    if start_by is None and expires is not None:
        start_by = run_at + expires  # a duration counts from when it is due
    if resumed:  # made pending by its park or its wake-up: it started in time already
        start_by = None
    update = (
        now,
        attempts + 1,
        worker_id,
        now + timeout,
        max_attempts,
        None if policy is None else json.dumps(policy),
        concurrency_key,
        now,
        task_id,
    )
    claim = Claimed(
        uuid.UUID(task_id),
        queue,
        name,
        payload,
        attempts + 1,
        max_attempts,
        timeout,
        now - ripe,
        trace,
        bool(step),
        time_limit,
        None if start_by is None else now - start_by,
    )
    return update, claim


def running(row: Sequence[Any], now: float) -> Running:
    """A row of ``lock_running`` or ``lock_expired``."""
    task_id, queue, name, payload, attempt, max_attempts, worker, spec, cancel = row
    return Running(
        uuid.UUID(task_id),
        queue,
        name,
        json.loads(payload),
        attempt,
        max_attempts,
        worker,
        json.loads(spec) if spec else None,
        bool(cancel),
        _at(now),
    )
