"""Enqueueing and managing tasks on the application's aiosqlite connection, with the
statements and helpers of the sync store: aiosqlite runs them on its own thread, so the
event loop never waits on the file."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from ...core.lifecycle import Transition
from ...core.task import Task, TaskState
from ...workflows.graph import WorkflowInfo
from ..aio import AsyncStore
from ..records import Changed, Inserted, WorkflowPlan, check_keys
from ..transitions import Child, Values, retriable
from .connection import QUERIES, Clock, _ids, errors
from .connection import clock as default_clock
from .enqueue import inserted, task_row
from .manage import DIALECT
from .rows import apply_params, changed, merged
from .steps import children_ended
from .workflows import children_of, rewait_rows, rows_of, workflow_info

_savepoints = itertools.count()


class Aiosqlite:
    def __init__(self, conn: Any) -> None:
        self.raw = conn

    async def fetch(self, query: str, params: Any) -> list[Sequence[Any]]:
        async with self.raw.execute(query, params) as cursor:
            return list(await cursor.fetchall())

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """As the store's ``transaction``: a write transaction that takes the lock first,
        committed when the block ends; a savepoint inside one already open."""
        if self.raw.in_transaction:
            async with self.savepoint():
                yield
            return
        with errors("begin a transaction"):
            try:
                await self.raw.execute(QUERIES["begin_immediate"])
            except BaseException:
                # Cancelled while it waits for the lock, the BEGIN still runs on aiosqlite's
                # thread and would keep the lock: undo it after. The cancel waits for that,
                # up to the busy timeout, rather than leave the lock held.
                await asyncio.shield(self._undo_begin())
                raise
        try:
            yield
        except BaseException:
            if self.raw.in_transaction:
                await self.raw.execute(QUERIES["rollback"])
            raise
        with errors("commit a transaction"):
            try:
                await self.raw.execute(QUERIES["commit"])
            except BaseException:
                if self.raw.in_transaction:  # a failed COMMIT keeps the lock (``_commit``)
                    await self.raw.execute(QUERIES["rollback"])
                raise

    async def _undo_begin(self) -> None:
        """ROLLBACK, once the BEGIN queued before has run, if it opened a transaction
        (``rollback()`` would do nothing on a connection made with ``autocommit=True``)."""
        await self.raw.execute(QUERIES["ping"])  # queued behind the BEGIN: runs after it
        if self.raw.in_transaction:
            await self.raw.execute(QUERIES["rollback"])

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        name = f"txqueue_{next(_savepoints)}"
        await self.raw.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            await self.raw.execute(f"ROLLBACK TO {name}")
            await self.raw.execute(f"RELEASE {name}")
            raise
        await self.raw.execute(f"RELEASE {name}")

    def in_transaction(self) -> bool:
        return bool(self.raw.in_transaction)


class AiosqliteStore(AsyncStore[Aiosqlite]):
    """``SqliteStore``'s enqueue and management, awaited on an ``Aiosqlite`` adapter."""

    dialect = DIALECT
    notifies = False

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = default_clock if clock is None else clock

    async def notify_wakeups(self, conn: Aiosqlite, notes: Sequence[str]) -> None:
        return None

    async def database_name(self, conn: Aiosqlite) -> str | None:
        return None  # one file, never one of several (config.databases)

    async def insert_task(
        self, conn: Aiosqlite, task: Task, trace: str | None = None, notify: bool = False
    ) -> Inserted:
        with errors("enqueue"):
            row = task_row(task, trace, self.clock.now())
            new = await conn.fetch(QUERIES["insert_task"], row)
            holder = (
                None if new else await conn.fetch(QUERIES["live_by_unique_key"], (task.unique_key,))
            )
        return inserted(task, new[0] if new else None, holder[0] if holder else None)

    async def insert_tasks(
        self, conn: Aiosqlite, tasks: Sequence[Task], trace: str | None = None, notify: bool = False
    ) -> list[Inserted]:
        """Many tasks in the caller's transaction, one statement each (in process, cheap)."""
        with errors("enqueue_many"):
            holders = {}
            for key in {t.unique_key for t in tasks if t.unique_key is not None}:
                rows = await conn.fetch(QUERIES["live_by_unique_key"], (key,))
                if rows:
                    holders[key] = (uuid.UUID(rows[0][0]), rows[0][1])
        check_keys(tasks, holders)
        return [await self.insert_task(conn, task, trace) for task in tasks]

    async def insert_workflow(
        self, conn: Aiosqlite, plan: WorkflowPlan, trace: str | None = None, notify: bool = False
    ) -> list[Inserted]:
        """A workflow in the caller's transaction (as ``workflows.insert_workflow``)."""
        workflow, steps = rows_of(plan, trace, self.clock.now())
        with errors("enqueue_workflow"):
            await conn.fetch(QUERIES["insert_workflow"], workflow)
            for row in steps:
                await conn.fetch(QUERIES["insert_step"], row)
            await conn.fetch(QUERIES["insert_waits"], (workflow[0],))
        return [Inserted(p.id, True) for p in plan.steps]

    async def get_workflow(self, conn: Aiosqlite, workflow_id: uuid.UUID) -> WorkflowInfo | None:
        with errors("show workflow"):
            head = await conn.fetch(QUERIES["get_workflow"], (str(workflow_id),))
            if not head:
                return None
            steps = await conn.fetch(QUERIES["workflow_steps"], (str(workflow_id),))
        return workflow_info(workflow_id, head[0], steps)

    # What ``follow`` asks of the store, on the caller's connection (as the sync store's).

    async def _rewait(
        self, conn: Aiosqlite, edges: Sequence[tuple[uuid.UUID, uuid.UUID, str]]
    ) -> None:
        for row in rewait_rows(edges):
            await conn.fetch(QUERIES["rewait"], row)

    async def _retriable(
        self, conn: Aiosqlite, ids: Sequence[uuid.UUID]
    ) -> list[tuple[uuid.UUID, TaskState]]:
        rows = await conn.fetch(QUERIES["retriable"], {"ids": _ids(ids)})
        return [(i, state) for i, state, _ in retriable(rows)]  # the unique index holds keys

    async def _write(self, conn: Aiosqlite, transitions: Sequence[Transition]) -> list[Changed]:
        now = self.clock.now()
        out = []
        for t in transitions:
            params = apply_params(t, now)
            if t.inputs is not None:
                found = await conn.fetch(QUERIES["payload"], (str(t.id),))
                params["payload"] = merged(found[0][0] if found else None, t.inputs)
            rows = await conn.fetch(QUERIES["apply"], params)
            if rows:
                out.append(changed(t.id, rows[0]))
        return out

    async def tell_parents(
        self, conn: Aiosqlite, ids: list[uuid.UUID]
    ) -> list[tuple[uuid.UUID, str]]:
        params = children_ended(ids, self.clock.now())
        await conn.fetch(QUERIES["forget_ends"], params)
        await conn.fetch(QUERIES["tell_parents"], params)
        rows = await conn.fetch(QUERIES["parked_on_any"], params)
        return [(uuid.UUID(r[0]), r[1]) for r in rows]

    async def keep_signal(self, conn: Aiosqlite, arg: tuple[str, str | None]) -> list[uuid.UUID]:
        key, payload = arg
        params = {"key": key, "payload": payload, "now": self.clock.now()}
        await conn.fetch(QUERIES["keep_signal"], params)
        return [uuid.UUID(r[0]) for r in await conn.fetch(QUERIES["parked_on"], (key,))]

    async def _free_waits(
        self, conn: Aiosqlite, parents: Sequence[uuid.UUID]
    ) -> list[tuple[uuid.UUID, uuid.UUID, str]]:
        rows = await conn.fetch(QUERIES["free_waits"], (_ids(parents),))
        return [(uuid.UUID(c), uuid.UUID(p), policy) for c, p, policy in rows]

    async def _children(
        self, conn: Aiosqlite, ids: Sequence[uuid.UUID]
    ) -> tuple[list[Child], Values]:
        children, refs = children_of(await conn.fetch(QUERIES["children"], (_ids(ids),)))
        found = await conn.fetch(QUERIES["step_results"], (refs,)) if refs else []
        return children, {i: (state, result, why) for i, state, result, why in found}
