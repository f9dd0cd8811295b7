"""Enqueueing on the application's asyncio connection to PostgreSQL (``aio_conns``), with
the statements of ``enqueue`` and ``workflows``, and what ``follow`` asks of the store
there; the rest is ``aio.AsyncStore``'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

import psycopg

from ...core.ids import uuid7
from ...core.lifecycle import Transition
from ...core.task import Task, TaskState
from ...workflows.graph import WorkflowInfo, workflow_of
from ..aio import AsyncCaller, AsyncStore
from ..follow import drive_async
from ..records import Changed, Inserted, WorkflowPlan
from ..transitions import Child, Values, kept, keyed, retriable
from .claims import apply_params, changed
from .connection import QUERIES, T, as_uuid, errors
from .enqueue import Steps, many_steps, notes, one_params, unique_steps
from .manage import DIALECT
from .steps import check_locked, children_ended
from .workflows import children_of, rewait_params, steps_params, workflow_params


class AsyncPostgresStore(AsyncStore[AsyncCaller]):
    """Enqueueing and managing tasks on an application's asyncio connection, with the
    sync store's statements."""

    dialect = DIALECT
    notifies = True

    async def notify_wakeups(self, conn: AsyncCaller, notes: Sequence[str]) -> None:
        """As ``waiting.notify_wakeups``."""
        with errors("notify"):
            await conn.fetch(QUERIES["notify_wakeups"], {"notes": list(notes)})

    async def database_name(self, conn: AsyncCaller) -> str | None:
        """As ``naming.database_name``."""
        with errors("database name"):
            [(named,)] = await conn.fetch(QUERIES["database_named"], None)
            rows = await conn.fetch(QUERIES["database_name"], None) if named else []
        return str(rows[0][0]) if rows else None

    async def insert_task(
        self, conn: AsyncCaller, task: Task, trace: str | None = None, notify: bool = False
    ) -> Inserted:
        """Insert one task in the caller's transaction (as ``enqueue.insert_task``)."""
        with errors("enqueue"):
            if task.unique_key is not None:
                return await self._run(conn, unique_steps(task, trace, notify))
            [found] = await conn.fetch(QUERIES["insert_one"], one_params(task, trace, notify))
            return Inserted(as_uuid(found[0]), True, found[1])

    async def insert_tasks(
        self,
        conn: AsyncCaller,
        tasks: Sequence[Task],
        trace: str | None = None,
        notify: bool = False,
    ) -> list[Inserted]:
        """Insert many tasks in one statement in the caller's transaction (as
        ``enqueue.insert_tasks``, without COPY)."""
        steps = many_steps(tasks, [uuid7() for _ in tasks], trace, notes(tasks, notify))
        block: AbstractAsyncContextManager[Any] = nullcontext()
        if tasks and not conn.in_transaction():
            block = conn.transaction()
        elif any(t.unique_key is not None for t in tasks):
            block = conn.savepoint()  # a key refused (Inserted.held) undoes the whole call
        with errors("enqueue_many"):
            async with block:
                return await self._run(conn, steps)

    async def _run(self, conn: AsyncCaller, steps: Steps[T]) -> T:
        """``enqueue``'s ``steps`` on the caller's connection."""
        return await drive_async(steps, lambda name, p: conn.fetch(QUERIES[name], p))

    async def insert_workflow(
        self,
        conn: AsyncCaller,
        plan: WorkflowPlan,
        trace: str | None = None,
        notify: bool = False,
    ) -> list[Inserted]:
        """Write a workflow in the caller's transaction (as ``workflows.insert_workflow``,
        without COPY)."""
        block: AbstractAsyncContextManager[Any] = nullcontext()
        if not conn.in_transaction():
            block = conn.transaction()
        with errors("enqueue_workflow"):
            async with block:
                [(slot, xid, _)] = await conn.fetch(
                    QUERIES["insert_workflow"], workflow_params(plan, notify)
                )
                await conn.fetch(QUERIES["insert_steps"], steps_params(plan, slot, trace))
                if any(p.parents for p in plan.steps):
                    await conn.fetch(QUERIES["insert_waits"], {"workflow_id": plan.id})
        return [Inserted(p.id, True, xid) for p in plan.steps]

    async def get_workflow(self, conn: AsyncCaller, workflow_id: uuid.UUID) -> WorkflowInfo | None:
        with errors("show workflow"):
            head = await conn.fetch(QUERIES["get_workflow"], (workflow_id,))
            if not head:
                return None
            steps = await conn.fetch(QUERIES["workflow_steps"], (workflow_id,))
        ids = [(as_uuid(r[0]), *r[1:]) for r in steps]
        return workflow_of(workflow_id, head[0][0], head[0][1], ids)

    async def _again(self, conn: AsyncCaller, block: Callable[[], Awaitable[T]]) -> T:
        """As ``connection.again_if_moved``: ``block()`` in a savepoint, run again from the
        start if a row it came to lock had just moved to another slot."""
        for attempt in range(3):
            try:
                async with conn.savepoint():
                    return await block()
            except psycopg.errors.SerializationFailure:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    # What ``follow`` asks of the store, on the caller's connection (as the sync store's).

    async def _rewait(
        self, conn: AsyncCaller, edges: Sequence[tuple[uuid.UUID, uuid.UUID, str]]
    ) -> None:
        await conn.fetch(QUERIES["rewait"], rewait_params(edges))

    async def _retriable(
        self, conn: AsyncCaller, ids: Sequence[uuid.UUID]
    ) -> list[tuple[uuid.UUID, TaskState]]:
        await conn.fetch(QUERIES["free_unique_keys"], {"keys": [], "ids": list(ids)})
        await conn.fetch(QUERIES["bring_back"], (list(ids),))
        found = retriable(await conn.fetch(QUERIES["retriable"], (list(ids),)))
        keys = keyed(found)
        rows = await conn.fetch(QUERIES["take_keys"], (keys,)) if keys else []
        return kept(found, {as_uuid(r[0]) for r in rows})

    async def _write(self, conn: AsyncCaller, transitions: Sequence[Transition]) -> list[Changed]:
        rows = await conn.fetch(QUERIES["apply"], apply_params(transitions))
        return [changed(row) for row in rows]

    async def keep_signal(self, conn: AsyncCaller, arg: tuple[str, str | None]) -> list[uuid.UUID]:
        key, payload = arg
        rows = await conn.fetch(QUERIES["lock_signal"], {"key": key})
        check_locked(rows[0] if rows else None)
        rows = await conn.fetch(QUERIES["keep_signal"], {"key": key, "payload": payload})
        return [as_uuid(r[0]) for r in rows]

    async def tell_parents(
        self, conn: AsyncCaller, ids: list[uuid.UUID]
    ) -> list[tuple[uuid.UUID, str]]:
        params = children_ended(ids)
        await conn.fetch(QUERIES["lock_signals"], params)
        rows = await conn.fetch(QUERIES["tell_parents"], params)
        return [(as_uuid(r[0]), r[1]) for r in rows]

    async def _free_waits(
        self, conn: AsyncCaller, parents: Sequence[uuid.UUID]
    ) -> list[tuple[uuid.UUID, uuid.UUID, str]]:
        rows = await conn.fetch(QUERIES["free_waits"], {"ids": list(parents)})
        return [(as_uuid(child), as_uuid(parent), policy) for child, parent, policy in rows]

    async def _children(
        self, conn: AsyncCaller, ids: Sequence[uuid.UUID]
    ) -> tuple[list[Child], Values]:
        return children_of(await conn.fetch(QUERIES["children"], {"ids": list(ids)}))
