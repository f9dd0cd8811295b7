"""What the asyncio stores share: enqueueing and managing tasks on an application's
asyncio connection, given the adapter ``connections.bind_async`` made of it.

The look-ups and searches are ``reads``' reads, and the retries and cancels by hand
``follow``'s steps: the same logic as the sync stores', awaited. A store gives its
``dialect``, its inserts, and what ``follow`` asks of it on the caller's connection
(``_write``, ``_free_waits``, ``_children``, ``_rewait``, ``_retriable``).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Generator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from ..core.stored import TaskInfo
from ..core.task import Task, TaskState
from ..operations.filters import TaskFilter
from ..workflows.graph import WorkflowInfo, WorkflowSearch, WorkflowSummary
from . import follow, reads
from .records import Inserted, Moved, WorkflowPlan

R = TypeVar("R")


class AsyncCaller(Protocol):
    """The application's asyncio connection, as txqueue's statements on it use one."""

    async def fetch(self, query: str, params: Any) -> list[Sequence[Any]]: ...
    def transaction(self) -> AbstractAsyncContextManager[Any]: ...
    def savepoint(self) -> AbstractAsyncContextManager[Any]: ...
    def in_transaction(self) -> bool: ...


Conn = TypeVar("Conn", bound=AsyncCaller)


class AsyncStore(Generic[Conn]):
    """The calls ``client_async`` makes on an application's asyncio connection."""

    dialect: ClassVar[reads.Dialect]
    notifies: ClassVar[bool]

    # --- what each store gives -----------------------------------------------------------

    async def notify_wakeups(self, conn: Conn, notes: Sequence[str]) -> None:
        """Send the wake-ups ``notes`` by the database, where it carries them."""
        raise NotImplementedError

    async def database_name(self, conn: Conn) -> str | None:
        """This database's name among several (as the sync store's)."""
        raise NotImplementedError

    async def insert_task(
        self, conn: Conn, task: Task, trace: str | None = None, notify: bool = False
    ) -> Inserted:
        """Insert one task in the caller's transaction (as the sync store's)."""
        raise NotImplementedError

    async def insert_tasks(
        self, conn: Conn, tasks: Sequence[Task], trace: str | None = None, notify: bool = False
    ) -> list[Inserted]:
        """Insert many tasks in the caller's transaction (as the sync store's)."""
        raise NotImplementedError

    async def insert_workflow(
        self, conn: Conn, plan: WorkflowPlan, trace: str | None = None, notify: bool = False
    ) -> list[Inserted]:
        """Write a workflow in the caller's transaction (as the sync store's)."""
        raise NotImplementedError

    async def get_workflow(self, conn: Conn, workflow_id: uuid.UUID) -> WorkflowInfo | None:
        raise NotImplementedError

    async def _again(self, conn: Conn, block: Callable[[], Awaitable[R]]) -> R:
        """``block()``, run again where the store must (a row it came to lock moved)."""
        return await block()

    # --- the calls -------------------------------------------------------------------------

    async def _read(self, conn: Conn, steps: reads.Reads[R]) -> R:
        queries = self.dialect.queries
        return await follow.drive_async(steps, lambda name, p: conn.fetch(queries[name], p))

    async def _drive(self, conn: Conn, steps: Generator[follow.Request, Any, R]) -> R:
        """Run ``follow``'s ``steps``, each request answered by the method of its name."""
        return await follow.drive_async(steps, lambda name, arg: getattr(self, name)(conn, arg))

    async def _changing_theirs(
        self, conn: Conn, action: str, steps: Callable[[], Generator[follow.Request, Any, R]]
    ) -> R:
        """``steps()`` driven in the caller's transaction (as ``Transitions``')."""
        with self.dialect.errors(action):
            return await self._again(conn, lambda: self._drive(conn, steps()))

    async def get_task(self, conn: Conn, task_id: uuid.UUID) -> TaskInfo | None:
        with self.dialect.errors("show"):
            return await self._read(conn, reads.get_task(self.dialect, task_id))

    async def find_tasks(
        self, conn: Conn, where: TaskFilter, before: uuid.UUID | None, limit: int
    ) -> list[TaskInfo]:
        """As ``reads.TaskReads.find_tasks``."""
        with self.dialect.errors("search"):
            return await self._read(conn, reads.find_tasks(self.dialect, where, before, limit))

    async def count_tasks(self, conn: Conn, where: TaskFilter, cap: int | None = None) -> int:
        with self.dialect.errors("count"):
            return await self._read(conn, reads.count_tasks(self.dialect, where, cap))

    async def list_workflows(
        self, conn: Conn, search: WorkflowSearch, before: uuid.UUID | None, limit: int
    ) -> list[WorkflowSummary]:
        """As ``reads.TaskReads.list_workflows``."""
        with self.dialect.errors("list workflows"):
            return await self._read(conn, reads.list_workflows(self.dialect, search, before, limit))

    async def list_tasks(
        self, conn: Conn, *, state: str | None, queue: str | None, name: str | None, limit: int
    ) -> list[TaskInfo]:
        params = {"state": state, "queue": queue, "name": name, "limit": limit}
        with self.dialect.errors("list"):
            return await self._read(conn, reads.list_tasks(self.dialect, params))

    async def retry_ids(
        self, conn: Conn, ids: Sequence[uuid.UUID], by: str | None = None
    ) -> list[Moved]:
        """As ``Transitions.retry_ids``, awaited."""
        return await self._changing_theirs(
            conn, "retry", functools.partial(follow.retrying, ids, by)
        )

    async def retry_failed(
        self,
        conn: Conn,
        queue: str | None,
        after: uuid.UUID,
        limit: int,
        by: str | None = None,
    ) -> list[Moved]:
        """As ``Transitions.retry_failed``, awaited."""
        steps = functools.partial(follow.retrying_failed, queue, after, limit, by)
        return await self._changing_theirs(conn, "retry", steps)

    async def cancel(
        self,
        conn: Conn,
        task_id: uuid.UUID,
        by: str | None = None,
        readied: list[tuple[str, Inserted]] | None = None,
    ) -> str | None:
        """As ``Transitions.cancel``, awaited."""
        steps = functools.partial(follow.cancelling_task, task_id, by, readied)
        return await self._changing_theirs(conn, "cancel", steps)

    async def cancel_workflow(
        self, conn: Conn, workflow_id: uuid.UUID, by: str | None = None
    ) -> dict[uuid.UUID, str]:
        """As ``Transitions.cancel_workflow``, awaited."""
        steps = functools.partial(follow.cancelling, workflow_id, by)
        return await self._changing_theirs(conn, "cancel workflow", steps)

    async def signal(self, conn: Conn, key: str, payload: str | None) -> list[Moved]:
        """As ``Parking.signal``, awaited."""
        steps = functools.partial(follow.signalling, key, payload)
        return await self._changing_theirs(conn, "signal", steps)

    # What ``follow`` asks of every store alike, on the caller's connection.

    async def lock_state(self, conn: Conn, task_id: uuid.UUID) -> TaskState | None:
        return await self._read(conn, reads.lock_state(self.dialect, task_id))

    async def _failed_page(
        self, conn: Conn, page: tuple[str | None, uuid.UUID, int]
    ) -> list[uuid.UUID]:
        return await self._read(conn, reads.failed_page(self.dialect, page))

    async def _open_steps(
        self, conn: Conn, workflow_id: uuid.UUID
    ) -> list[tuple[uuid.UUID, TaskState]]:
        return await self._read(conn, reads.open_steps(self.dialect, workflow_id))

    async def _steps_of(self, conn: Conn, ids: Sequence[uuid.UUID]) -> list[tuple[Any, ...]]:
        return await self._read(conn, reads.steps_of(self.dialect, ids))
