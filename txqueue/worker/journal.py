"""Where a worker's attempts keep their steps (``tasks.steps.Journal``): on the connection
of the handler thread that runs the attempt, the one its atomic tasks use, so the worker
holds no more connections for steps than for atomic tasks."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Generic

from ..core.task import Task, child_of
from ..errors import StepError, TaskError
from ..store.protocols import Own
from ..store.records import Claimed, Inserted, StepDone
from ..store.roles import Recording
from ..workflows.workflow import Workflow

_Ready = list[tuple[str, Inserted]]
Wake = Callable[[_Ready], object]
"""Sends the wake-ups of tasks a step enqueued, once its transaction has committed."""


class _Lost(Exception):
    """The step's record was fenced out: roll its transaction back."""


class StoreJournal(Generic[Own]):
    """The steps of ``task``'s attempt, run by ``worker_id``, on the connection that
    ``use(call)`` calls ``call`` with (``Link.use``); ``driver(conn)`` is the driver's
    connection under it, which an atomic step's function is given; ``thread_bound``: that
    connection must stay on the thread that made it."""

    def __init__(
        self,
        store: Recording[Own],
        use: Callable[[Callable[[Own], Any]], Any],
        task: Claimed,
        worker_id: str,
        driver: Callable[[Own], Any] = lambda conn: conn,
        thread_bound: bool = False,
        wake: Wake = lambda ready: None,
    ) -> None:
        self.thread_bound = thread_bound
        self._wake = wake
        self._store = store
        self._use = use
        self._task = task
        self._worker_id = worker_id
        self._driver = driver

    def recorded(self) -> list[dict[str, Any]]:
        steps: list[dict[str, Any]] = self._use(
            lambda conn: self._store.recorded_steps(conn, self._task.id)
        )
        return steps

    def record(self, name: str, result: str, took: float) -> None:
        done = self._done(name, result, took)
        if not self._use(lambda conn: self._store.record_step(conn, done)):
            raise _lost(name)

    def transaction(self, name: str, work: Callable[[Any], tuple[str, float]]) -> None:
        def run(conn: Own) -> None:
            with self._store.atomic(conn):
                result, took = work(self._driver(conn))
                done = self._done(name, result, took)
                if not self._store.record_step(conn, done, in_transaction=True):
                    raise _Lost

        try:
            self._use(run)
        except _Lost:
            raise _lost(name) from None

    def now(self) -> float:
        moment: float = self._use(lambda conn: self._store.now(conn).timestamp())
        return moment

    def receive(self, name: str, key: str, timed_out: bool) -> str | None:
        def run(conn: Own) -> str | None:
            with self._store.atomic(conn):
                found, payload = self._store.take_signal(conn, self._task.id, key)
                if not found and not timed_out:
                    return None  # the key's lock goes with this commit: the park checks again
                # The payload is JSON text already: not parsed, to be written out again.
                text = f'{{"signal": {payload}}}' if found else '{"timed_out": true}'
                if not self._store.record_step(conn, self._done(name, text, 0.0), True):
                    raise _Lost
                return text

        try:
            got: str | None = self._use(run)
        except _Lost:
            raise _lost(name) from None
        return got

    def enqueue(self, name: str, child: Task | Workflow) -> str:
        if not isinstance(child, Task | Workflow):
            raise StepError(name, f"must start a txqueue.Task or Workflow, not {child!r}")
        ready: _Ready = []

        def run(conn: Own) -> str:
            with self._store.atomic(conn):
                if isinstance(child, Workflow):
                    text = self._insert_workflow(conn, child, ready)
                else:
                    text = self._insert_task(conn, name, child, ready)
                if not self._store.record_step(conn, self._done(name, text, 0.0), True):
                    raise _Lost
                return text

        try:
            text: str = self._use(run)
        except _Lost:
            raise _lost(name) from None
        self._wake(ready)
        return text

    def _insert_task(self, conn: Own, name: str, task: Task, ready: _Ready) -> str:
        """The child task's row; its id as JSON."""
        inserted = self._store.insert_child(conn, child_of(task, self._task.id))
        if not inserted.new:
            raise StepError(
                name,
                f"unique_key {task.unique_key!r}: task {inserted.id} holds it; a child "
                "must be new, for its end to come back to this task",
            )
        ready.append((task.queue, inserted))
        return json.dumps(str(inserted.id))

    def _insert_workflow(self, conn: Own, flow: Workflow, ready: _Ready) -> str:
        """The child workflow's steps, those that end it (no step after them) children of
        this task; its id and theirs, [name, id] each in the workflow's order (a list: a
        JSON object's keys may come back in another order), as JSON."""
        plan = flow.plan()
        after = {parent for p in plan.steps for parent in p.parents}
        ends = [(p.step, str(p.id)) for p in plan.steps if str(p.id) not in after]
        last = {step for step, _ in ends}
        steps = [
            replace(p, task=child_of(p.task, self._task.id)) if p.step in last else p
            for p in plan.steps
        ]
        rows = self._store.insert_child_workflow(conn, replace(plan, steps=steps))
        ready += [(p.task.queue, row) for p, row in zip(steps, rows, strict=True) if not p.parents]
        return json.dumps({"workflow": str(plan.id), "ends": ends})

    def _done(self, name: str, result: str, took: float) -> StepDone:
        task = self._task
        return StepDone(task.id, task.attempts, self._worker_id, name, result, took)


def _lost(name: str) -> TaskError:
    return TaskError(
        f"step {name!r}: not recorded, this attempt lost its lease (the task was recovered)"
    )
