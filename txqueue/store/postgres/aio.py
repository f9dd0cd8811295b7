"""Enqueueing and managing tasks on the application's asyncio connection: psycopg's
``AsyncConnection`` or asyncpg's (also one from a pool), with the statements of ``enqueue``
and ``manage``.

asyncpg takes ``$1`` placeholders where psycopg takes ``%(name)s``: each statement is
rewritten once, and its parameters passed in that order.
"""

from __future__ import annotations

import contextlib
import functools
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol

import psycopg
import psycopg.rows

from ... import lifecycle
from ...errors import StoreError
from ...filters import TaskFilter
from ...graph import WorkflowInfo, workflow_of
from ...ids import uuid7
from ...lifecycle import Transition
from ...task import Task, TaskInfo, TaskState
from .. import follow
from ..reads import NEWEST
from ..records import Changed, Inserted, Moved, WorkflowPlan
from ..transitions import Child, Values, kept, keyed, retriable
from .claims import apply_params, changed
from .connection import QUERIES, T, errors
from .enqueue import columns, in_order, notes, one_params, task_params, unheld
from .manage import filter_params, task_info
from .workflows import children_of, rewait_params, steps_params, workflow_params

if TYPE_CHECKING:
    from ..protocols import AsyncEnqueue


class AsyncCaller(Protocol):
    """The application's asyncio connection, as txqueue's statements on it use one."""

    async def fetch(self, query: str, params: Any) -> list[Sequence[Any]]: ...
    def transaction(self) -> AbstractAsyncContextManager[Any]: ...
    def savepoint(self) -> AbstractAsyncContextManager[Any]: ...
    def in_transaction(self) -> bool: ...


class PsycopgAsync:
    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.raw = conn

    async def fetch(self, query: str, params: Any) -> list[Sequence[Any]]:
        # A tuple cursor whatever the caller's row factory: rows are read by position.
        cursor = self.raw.cursor(row_factory=psycopg.rows.tuple_row)
        await cursor.execute(query, params, prepare=True)
        return [] if cursor.description is None else list(await cursor.fetchall())

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        return self.raw.transaction()

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        """A block whose failure the caller's transaction survives (as the sync store's
        ``savepoint``): psycopg's own block would commit a transaction it began."""
        if self.raw.autocommit:
            async with self.raw.transaction():
                yield
            return
        await self.raw.execute(QUERIES["savepoint"])
        try:
            yield
        except BaseException:
            await self.raw.execute(QUERIES["rollback_to_savepoint"])
            raise
        await self.raw.execute(QUERIES["release_savepoint"])

    def in_transaction(self) -> bool:
        return not self.raw.autocommit or (
            self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
        )


_NAMED = re.compile(r"%\((\w+)\)s|%s")


@functools.cache
def _dollars(query: str) -> tuple[str, tuple[str | int, ...]]:
    """``query`` with ``$n`` placeholders, and for each ``n`` the parameter it takes (a name,
    or a position)."""
    order: list[str | int] = []

    def number(match: re.Match[str]) -> str:
        key: str | int = match.group(1) or sum(1 for k in order if isinstance(k, int))
        if key not in order:
            order.append(key)
        return f"${order.index(key) + 1}"

    return _NAMED.sub(number, query), tuple(order)


class Asyncpg:
    def __init__(self, conn: Any) -> None:
        self.raw = conn

    async def fetch(self, query: str, params: Any) -> list[Sequence[Any]]:
        sql, order = _dollars(query)
        args = [params[k] for k in order]
        try:
            return list(await self.raw.fetch(sql, *args))
        except (OSError, TimeoutError) as exc:  # the connection, lost
            raise psycopg.OperationalError(str(exc)) from exc
        except Exception as exc:  # asyncpg's, raised as psycopg's: the store reports those
            if not type(exc).__module__.startswith("asyncpg"):
                raise
            kind: type[psycopg.Error] = psycopg.DatabaseError
            with contextlib.suppress(KeyError):  # a SQLSTATE newer than this psycopg
                kind = psycopg.errors.lookup(str(getattr(exc, "sqlstate", None) or ""))
            raise kind(str(exc)) from exc

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        return self.raw.transaction()  # type: ignore[no-any-return]

    def savepoint(self) -> AbstractAsyncContextManager[Any]:
        # asyncpg's block is a savepoint inside a transaction, and one of its own outside.
        return self.transaction()

    def in_transaction(self) -> bool:
        return bool(self.raw.is_in_transaction())


def _id(value: Any) -> uuid.UUID:
    """asyncpg returns its own UUID type: txqueue's callers get the standard one."""
    return value if type(value) is uuid.UUID else uuid.UUID(str(value))


class AsyncPostgresStore:
    """Enqueueing and reading a task on an application's asyncio connection, with the
    sync store's statements."""

    notifies = True

    async def notify_wakeups(self, conn: AsyncCaller, notes: Sequence[str]) -> None:
        """As ``waiting.notify_wakeups``."""
        with errors("notify"):
            await conn.fetch(QUERIES["notify_wakeups"], {"notes": list(notes)})

    async def insert_task(
        self, conn: AsyncCaller, task: Task, trace: str | None = None, notify: bool = False
    ) -> Inserted:
        """Insert one task in the caller's transaction (as ``enqueue.insert_task``)."""
        with errors("enqueue"):
            if task.unique_key is None:
                [found] = await conn.fetch(QUERIES["insert_one"], one_params(task, trace, notify))
                return Inserted(_id(found[0]), True, found[1])
            for _ in range(10):
                rows = await conn.fetch(
                    QUERIES["insert_one_unique"], one_params(task, trace, notify)
                )
                if rows:
                    return Inserted(_id(rows[0][0]), True, rows[0][1])
                held = await conn.fetch(QUERIES["live_by_unique_key"], ([task.unique_key],))
                if held:
                    return Inserted.held(task, _id(held[0][1]), held[0][2])
                await conn.fetch(
                    QUERIES["free_unique_keys"], {"keys": [task.unique_key], "ids": []}
                )
        raise StoreError(f"enqueue: unique_key {task.unique_key!r} kept changing hands; try again")

    async def insert_tasks(
        self,
        conn: AsyncCaller,
        tasks: Sequence[Task],
        trace: str | None = None,
        notify: bool = False,
    ) -> list[Inserted]:
        """Insert many tasks in one statement in the caller's transaction (as
        ``enqueue.insert_tasks``, without COPY)."""
        ids = [uuid7() for _ in tasks]
        rows = [task_params(t, i, trace) for t, i in zip(tasks, ids, strict=True)]
        woken = notes(tasks, notify)
        block: AbstractAsyncContextManager[Any] = nullcontext()
        if tasks and not conn.in_transaction():
            block = conn.transaction()
        elif any(t.unique_key is not None for t in tasks):
            block = conn.savepoint()  # a key refused (Inserted.held) undoes the whole call
        with errors("enqueue_many"):
            async with block:
                xid_by_id: dict[uuid.UUID, str] = {}
                holders: dict[str, tuple[uuid.UUID, str]] = {}
                todo = rows
                for _ in range(10):
                    returned = await conn.fetch(QUERIES["insert_many"], columns(todo, woken))
                    xid_by_id.update((_id(r[0]), r[1]) for r in returned)
                    todo = [r for r in todo if r["id"] not in xid_by_id]
                    if not todo:
                        break
                    keys = [r["unique_key"] for r in todo]
                    held = await conn.fetch(QUERIES["live_by_unique_key"], (keys,))
                    holders.update((key, (_id(holder), name)) for key, holder, name in held)
                    todo, stale = unheld(todo, holders)
                    if not todo:
                        break
                    await conn.fetch(QUERIES["free_unique_keys"], {"keys": stale, "ids": []})
                return in_order(tasks, rows, xid_by_id, holders)

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
        ids = [(_id(r[0]), *r[1:]) for r in steps]
        return workflow_of(workflow_id, head[0][0], head[0][1], ids)

    async def get_task(self, conn: AsyncCaller, task_id: uuid.UUID) -> TaskInfo | None:
        with errors("show"):
            rows = await conn.fetch(QUERIES["get_task"], (task_id,))
        return task_info(rows[0]) if rows else None

    async def find_tasks(
        self, conn: AsyncCaller, where: TaskFilter, before: uuid.UUID | None, limit: int
    ) -> list[TaskInfo]:
        """As ``reads.find_tasks``."""
        params = filter_params(where, where.states)
        params |= {"before": before or NEWEST, "limit": limit}
        with errors("search"):
            rows = await conn.fetch(QUERIES["find_tasks"], params)
        return [task_info(r) for r in rows]

    async def count_tasks(
        self, conn: AsyncCaller, where: TaskFilter, cap: int | None = None
    ) -> int:
        params = filter_params(where, where.states) | {"cap": cap}
        with errors("count"):
            rows = await conn.fetch(QUERIES["count_tasks"], params)
        return int(rows[0][0])

    async def list_tasks(
        self,
        conn: AsyncCaller,
        *,
        state: str | None,
        queue: str | None,
        name: str | None,
        limit: int,
    ) -> list[TaskInfo]:
        params = {"state": state, "queue": queue, "name": name, "limit": limit}
        with errors("list"):
            rows = await conn.fetch(QUERIES["list_tasks"], params)
        return [task_info(r) for r in rows]

    async def retry_ids(
        self, conn: AsyncCaller, ids: Sequence[uuid.UUID], by: str | None = None
    ) -> list[Moved]:
        """As ``Transitions.retry_ids``, awaited."""

        async def answer(name: str, arg: Any) -> Any:
            return await getattr(self, name)(conn, arg)

        async def retry() -> list[Moved]:
            return await follow.drive_async(follow.retrying(ids, by), answer)

        with errors("retry"):
            return await _again_if_moved(conn, retry)

    async def retry_failed(
        self,
        conn: AsyncCaller,
        queue: str | None,
        after: uuid.UUID,
        limit: int,
        by: str | None = None,
    ) -> list[Moved]:
        """As ``Transitions.retry_failed``, awaited."""
        params = {"queue": queue, "after": after, "limit": limit}

        async def answer(name: str, arg: Any) -> Any:
            return await getattr(self, name)(conn, arg)

        async def retry() -> list[Moved]:
            ids = [_id(r[0]) for r in await conn.fetch(QUERIES["failed_page"], params)]
            return await follow.drive_async(follow.retrying(ids, by), answer) if ids else []

        with errors("retry"):
            return await _again_if_moved(conn, retry)

    async def cancel(
        self,
        conn: AsyncCaller,
        task_id: uuid.UUID,
        by: str | None = None,
        readied: list[tuple[str, Inserted]] | None = None,
    ) -> str | None:
        """As ``Transitions.cancel``, awaited."""

        async def answer(name: str, arg: Any) -> Any:
            return await getattr(self, name)(conn, arg)

        async def cancel() -> str | None:
            rows = await conn.fetch(QUERIES["lock_task"], (task_id,))
            t = lifecycle.cancelled(task_id, TaskState(rows[0][0]), by) if rows else None
            if t is None:
                return None
            written = await follow.drive_async(follow.following([t]), answer)
            if task_id in written and readied is not None:
                readied.extend(written.ready)
            return written.get(task_id)

        with errors("cancel"):
            return await _again_if_moved(conn, cancel)

    async def cancel_workflow(
        self, conn: AsyncCaller, workflow_id: uuid.UUID, by: str | None = None
    ) -> dict[uuid.UUID, str]:
        """As ``Transitions.cancel_workflow``, awaited."""

        async def answer(name: str, arg: Any) -> Any:
            return await getattr(self, name)(conn, arg)

        async def cancel() -> dict[uuid.UUID, str]:
            return await follow.drive_async(follow.cancelling(workflow_id, by), answer)

        with errors("cancel workflow"):
            return await _again_if_moved(conn, cancel)

    # What ``follow`` asks of a store, on the caller's connection (as the sync store's).

    async def _steps_of(self, conn: AsyncCaller, ids: Sequence[uuid.UUID]) -> list[tuple[Any, ...]]:
        rows = await conn.fetch(QUERIES["steps_of"], {"ids": list(ids)})
        return [(_id(i), state, move, parents, _id(w)) for i, state, move, parents, w in rows]

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
        return kept(found, {_id(r[0]) for r in rows})

    async def _open_steps(
        self, conn: AsyncCaller, workflow_id: uuid.UUID
    ) -> list[tuple[uuid.UUID, TaskState]]:
        rows = await conn.fetch(QUERIES["open_steps"], (workflow_id,))
        return [(_id(i), TaskState(state)) for i, state in rows]

    async def _write(self, conn: AsyncCaller, transitions: Sequence[Transition]) -> list[Changed]:
        rows = await conn.fetch(QUERIES["apply"], apply_params(transitions))
        return [changed(row) for row in rows]

    async def _free_waits(
        self, conn: AsyncCaller, parents: Sequence[uuid.UUID]
    ) -> list[tuple[uuid.UUID, uuid.UUID, str]]:
        rows = await conn.fetch(QUERIES["free_waits"], {"ids": list(parents)})
        return [(_id(child), _id(parent), policy) for child, parent, policy in rows]

    async def _children(
        self, conn: AsyncCaller, ids: Sequence[uuid.UUID]
    ) -> tuple[list[Child], Values]:
        return children_of(await conn.fetch(QUERIES["children"], {"ids": list(ids)}))


if TYPE_CHECKING:
    _satisfies: AsyncEnqueue[AsyncCaller] = AsyncPostgresStore()


async def _again_if_moved(conn: AsyncCaller, block: Callable[[], Awaitable[T]]) -> T:
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
