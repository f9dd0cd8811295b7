"""What the end of a workflow's step does to its children, in the transaction that ends
it: the edges from it deleted (and its children locked), the children read, each one's
change decided by ``readiness.after_parents`` and applied, and so on down the graph. So
too the end of a task a handler started (``ctx.start_child``): its parent's wait woken.

The steps are written once, as a generator of the store calls they need (``following``),
so that the sync stores and the asyncio ones (a cancel on an application's asyncio
connection) run the same logic: ``drive`` answers each call at once, ``drive_async``
awaits it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any, TypeVar

from ..core import lifecycle
from ..core.lifecycle import Transition
from ..core.task import SUCCEEDED, WAITING
from ..workflows import readiness
from ..workflows.readiness import Child, Parent
from .records import Applied, Changed, Inserted, Moved

R = TypeVar("R")
Request = tuple[str, Any]  # a store method's name, and its argument after the connection


def following(
    transitions: Sequence[Transition], ended: Mapping[uuid.UUID, Parent] | None = None
) -> Generator[Request, Any, Applied]:
    """Apply ``transitions``, then the changes of the children of the steps they ended,
    and theirs in turn; the states written, and the steps readied (for their wake-ups).
    ``ended``: steps that ended before, whose children are seen to first (the cleaner's
    repair of a step left waiting).

    It yields (the store method's name, its argument) and is sent its answer:
    ``_write(transitions) -> list[Changed]``, ``_free_waits(parents) -> [(child, parent,
    on_failure)]`` (unless the write did that: ``Changed.freed``), ``_children(ids) ->
    ([(id, state, waits, inputs' spec)], {parent id as text: (state, result, reason)})``:
    the children, and the parents whose results the inputs of those no edge is left to
    take. A move's ``enqueues`` are inserted too (``_enqueue``), and the parents of the
    children it ended are signalled (``_telling``)."""
    applied = Applied()
    todo = list(transitions)
    if ended:
        todo += yield from _children_of(ended)
    while todo:
        why = {t.id: t.reason() for t in todo}
        now_ended: dict[uuid.UUID, Parent] = {}
        edges: list[tuple[uuid.UUID, uuid.UUID, str]] | None = []
        changed: list[Changed] = yield ("_write", todo)
        yield from _enqueue(todo, {c.id for c in changed}, applied)
        for c in changed:
            applied[c.id] = c.state
            if c.queue is not None:
                applied.ready.append((c.queue, Inserted(c.id, True, c.xid)))
            if c.step is not None and lifecycle.finished(c.state):
                now_ended[c.id] = Parent(c.state, c.step, why.get(c.id))
                if c.freed is None:
                    edges = None  # the write left them: asked for below
                elif edges is not None:
                    edges += [(child, c.id, policy) for child, policy in c.freed]
        todo = (yield from _children_of(now_ended, edges)) if now_ended else []
        told = sorted(c.id for c in changed if c.signals)
        if told:
            todo += yield from _telling(told)
    return applied


def _telling(ended: list[uuid.UUID]) -> Generator[Request, Any, list[Transition]]:
    """The wakes of the parents waiting for the children that just ``ended``: each child's
    end is kept as the signal ``task:<id>``, which the parent's wait takes. Asks
    ``tell_parents(ids) -> [(parked task, its key)]``: the signals kept, and the tasks
    parked on them that no other transaction holds, locked (the others are woken by the
    next look: a parked task whose signal is kept)."""
    waiting = yield ("tell_parents", ended)
    return [lifecycle.woken(i, None, f"signal {key}") for i, key in waiting]


def _enqueue(
    todo: Sequence[Transition], written: set[uuid.UUID], applied: Applied
) -> Generator[Request, Any, None]:
    """The tasks the moves ``written`` enqueue (a compensation), in their transaction; a
    new one is readied for its wake-up. Asks ``insert_task(task) -> Inserted``."""
    for t in todo:
        if t.id not in written:
            continue
        for task in t.enqueues:
            inserted: Inserted = yield ("insert_task", task)
            applied.enqueued[t.id] = (task.queue, inserted)
            if inserted.new:
                applied.ready.append((task.queue, inserted))


def _children_of(
    ended: Mapping[uuid.UUID, Parent],
    edges: Sequence[tuple[uuid.UUID, uuid.UUID, str]] | None = None,
) -> Generator[Request, Any, list[Transition]]:
    """The transitions of the children of the steps that just ``ended``; ``edges``: the
    edges from them (child, parent, OnFailure) if the write that ended them deleted them
    (and locked the children), else None."""
    if edges is None:
        edges = yield ("_free_waits", list(ended))
    freed: dict[uuid.UUID, list[tuple[uuid.UUID, str]]] = {}
    # Each child's parents in their ids' order, their steps' order of creation: of two
    # that ended at once with different policies, the first decides, whatever order the
    # store returned the edges in.
    for child_id, parent, policy in sorted(edges):
        freed.setdefault(child_id, []).append((parent, policy))
    if not freed:
        return []
    rows, values = yield ("_children", sorted(freed))
    ready = {
        i: json.loads(spec)
        for i, state, waits, spec in rows
        if state == WAITING and not waits and spec
    }
    out = []
    for child_id, state, waits, _ in rows:
        spec = ready.get(child_id)
        inputs = None if spec is None else gather(spec, values)
        t = readiness.after_parents(
            Child(child_id, state, waits, tuple(freed[child_id]), inputs), ended
        )
        if t is not None:
            out.append(t)
    return out


def cancelling(
    workflow_id: uuid.UUID, by: str | None
) -> Generator[Request, Any, dict[uuid.UUID, str]]:
    """Cancel every step of a workflow that has not ended: waiting and pending ones end
    cancelled, running ones are asked to stop. A step that moved between the read and the
    write (claimed meanwhile) is read again. What each step became; asks
    ``_open_steps(workflow_id) -> [(id, state)]`` besides ``following``'s."""
    written: dict[uuid.UUID, str] = {}
    for _ in range(3):
        found = yield ("_open_steps", workflow_id)
        todo = [
            t
            for i, state in found
            if i not in written and (t := lifecycle.cancelled(i, state, by)) is not None
        ]
        if not todo:
            break
        written.update((yield from following(todo)))
    return written


CANCEL_TRIES = 3
"""Reads of a cancel whose task a claim moved between its read and its write."""


def cancelling_task(
    task_id: uuid.UUID, by: str | None, readied: list[tuple[str, Inserted]] | None
) -> Generator[Request, Any, str | None]:
    """A cancel by hand of one task (``Transitions.cancel``): the state it left, or None
    when it was not pending, waiting or running; the steps it readied are added to
    ``readied``. Asks ``lock_state(task_id) -> TaskState | None`` besides ``following``'s.
    Where the read locks nothing (SQLite outside a write), a claim may move the task
    between the read and the write: the write's fence refuses it, and the cancel reads
    again."""
    for _ in range(CANCEL_TRIES):
        found = yield ("lock_state", task_id)
        t = None if found is None else lifecycle.cancelled(task_id, found, by)
        if t is None:
            return None
        written = yield from following([t])
        if task_id in written:
            if readied is not None:  # a step's child that runs however it ends
                readied.extend(written.ready)
            return written[task_id]
    return None


def retrying_failed(
    queue: str | None, after: uuid.UUID, limit: int, by: str | None
) -> Generator[Request, Any, list[Moved]]:
    """``retrying`` of a page of failed tasks (``Transitions.retry_failed``). Asks
    ``_failed_page((queue, after, limit)) -> [id]`` besides ``retrying``'s."""
    ids = yield ("_failed_page", (queue, after, limit))
    return (yield from retrying(ids, by)) if ids else []


def retrying(ids: Sequence[uuid.UUID], by: str | None) -> Generator[Request, Any, list[Moved]]:
    """A retry by hand of ``ids``: each failed or cancelled one (a workflow's step only
    when its parents no longer hold it back) back to pending now (``lifecycle.retried``),
    and the steps their ends had blocked or skipped waiting again (``rearming``); the
    tasks moved, for their wake-ups. Asks ``_retriable(ids) -> [(id, state)]``: those that
    may be retried, locked (it raises if a live task holds one's unique key)."""
    rows = yield ("_retriable", list(ids))
    todo = [t for i, state in rows if (t := lifecycle.retried(i, state, by)) is not None]
    if not todo:
        return []
    applied = yield from following(todo)
    moved = [Moved(i.id, queue, i.xid) for queue, i in applied.ready]
    yield from rearming([m.id for m in moved], by)
    return moved


def signalling(key: str, payload: str | None) -> Generator[Request, Any, list[Moved]]:
    """A signal (``txqueue.signal``): kept for the next wait of ``key`` to take, and every
    task parked on the key woken (``lifecycle.woken``); the tasks woken, for their
    wake-ups. Asks ``keep_signal((key, payload)) -> [id]``: the signal kept after the
    key's lock, and the tasks parked on it, locked."""
    waiting = yield ("keep_signal", (key, payload))
    if not waiting:
        return []
    applied = yield from following([lifecycle.woken(i, None, f"signal {key}") for i in waiting])
    return [Moved(i.id, queue, i.xid) for queue, i in applied.ready]


def rearming(ids: Sequence[uuid.UUID], by: str | None) -> Generator[Request, Any, int]:
    """After a retry by hand of ``ids``: set waiting again the steps of their workflows
    that their failure had blocked or skipped (``readiness.rearmed``), each with an edge
    again from its parents that will run again; how many. Asks ``_steps_of(ids) -> [(id,
    state, last move, parents as JSON text, workflow id)]`` and ``_rewait([(parent,
    child, OnFailure)])`` besides ``following``'s."""
    if not ids:
        return 0
    rows = yield ("_steps_of", list(ids))
    if not rows:
        return 0
    steps = {i: (state, move, json.loads(parents or "{}")) for i, state, move, parents, _ in rows}
    again = readiness.rearmed(set(ids), steps)
    if not again:
        return 0
    applied = yield from following([lifecycle.rearmed(child, by) for child in sorted(again)])
    back = again | set(ids)
    edges = [
        (uuid.UUID(parent), child, on)
        for child in sorted(again)
        if applied.get(child) == WAITING
        for parent, on in steps[child][2].items()
        if uuid.UUID(parent) in back
    ]
    if edges:
        yield ("_rewait", edges)
    return len(applied)


def drive(steps: Generator[Request, Any, R], answer: Callable[[str, Any], Any]) -> R:
    """Run ``steps``, each request answered by ``answer(method's name, argument)``."""
    try:
        request = next(steps)
        while True:
            request = steps.send(answer(*request))
    except StopIteration as done:
        out: R = done.value
        return out


async def drive_async(
    steps: Generator[Request, Any, R], answer: Callable[[str, Any], Awaitable[Any]]
) -> R:
    """``drive``, each answer awaited."""
    try:
        request = next(steps)
        while True:
            request = steps.send(await answer(*request))
    except StopIteration as done:
        out: R = done.value
        return out


def gather(
    spec: Mapping[str, Any], values: Mapping[str, tuple[str, str | None, str | None]]
) -> str:
    """A step's inputs as the JSON object merged into its arguments: each argument its
    parent's result (``"as": "result"``) or ``Outcome`` (``"as": "outcome"``), or a list
    of them. The results stay JSON text: joined here, never parsed."""

    def one(kind: str, parent: str) -> str:
        state, result, reason = values[parent]
        if kind == "result":
            return result or "null"
        why = None if state == SUCCEEDED else reason
        return (
            f'{{"state": {json.dumps(state)}, "result": {result or "null"}, '
            f'"reason": {json.dumps(why)}}}'
        )

    parts = []
    for arg, ref in spec.items():
        ids = ref["from"]
        if isinstance(ids, list):
            text = "[" + ", ".join(one(ref["as"], i) for i in ids) + "]"
        else:
            text = one(ref["as"], ids)
        parts.append(f"{json.dumps(arg)}: {text}")
    return "{" + ", ".join(parts) + "}"
