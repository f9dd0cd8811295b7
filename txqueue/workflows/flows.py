"""The workflow calls: ``enqueue_workflow`` writes one in the caller's transaction
(``enqueue.writing``); ``get_workflow`` reads each step's state, ``list_workflows`` a page
of workflows, ``wait_workflow`` awaits one's end, ``cancel_workflow`` ends what has not
(each with its asyncio form)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Generator, Sequence
from datetime import datetime
from typing import Any

from .. import config
from ..core.lifecycle import FINISHED
from ..errors import TaskNotFoundError, WaitTimeoutError
from ..operations.bulk import check_by
from ..operations.manage import task_id_of
from ..operations.search import check_limit, page_start
from ..operations.waiting import wait_async_by, wait_by
from ..outbox.client import Delivery
from ..store import serving
from ..store.connections import bind, bind_async
from ..store.plans import Plan, call, drive, drive_async, run, run_async
from ..store.protocols import AnyStore, Manage
from .enqueue import check_workflow, writing
from .graph import RUNNING_FLOW, WorkflowInfo, WorkflowSearch, WorkflowSummary, workflow_search
from .workflow import Workflow

Ask = tuple[str, Any]
"""What ``awaiting`` asks: ("read", workflow id) or ("wait", (step id, seconds left))."""


class WorkflowCalls:
    """The workflow calls through a configuration's store and wake-ups (None: the store
    of the connection's kind, ``configure``'s broker)."""

    _store: AnyStore | None = None
    _delivery: Delivery | None = None

    def enqueue_workflow(self, conn: object, workflow: Workflow) -> uuid.UUID:
        """Write every step of ``workflow`` in the caller's transaction on ``conn``, or none,
        and return the workflow's id. As ``enqueue``: it exists if and only if that
        transaction commits, and txqueue never commits for the caller. The steps without
        parents are woken at once; each other step waits, and is readied in the transaction
        that ends its last parent.

        Example:

        ```python
        flow = txqueue.Workflow("receipts")
        receipts = [flow.step(send_receipt, n) for n in (1, 2, 3)]  # a group
        workflow_id = txqueue.enqueue_workflow(conn, flow)
        ```
        """
        plan = check_workflow(workflow).plan()
        bound = bind(conn, self._store)
        return run(writing(bound, plan, self._delivery), bound)

    async def enqueue_workflow_async(self, conn: object, workflow: Workflow) -> uuid.UUID:
        """``enqueue_workflow`` on an asyncio connection.

        Example:

        ```python
        flow = txqueue.Workflow("receipts")
        flow.step(send_receipt, 1)
        workflow_id = await txqueue.enqueue_workflow_async(conn, flow)
        ```
        """
        plan = check_workflow(workflow).plan()
        bound = await bind_async(conn, self._store)
        return await run_async(writing(bound, plan, self._delivery), bound)

    def get_workflow(self, conn: object, workflow_id: uuid.UUID | str) -> WorkflowInfo:
        """The workflow as stored, each step with its state; TaskNotFoundError if there is
        none. ``conn``: any connection ``enqueue`` takes.

        Example:

        ```python
        flow = txqueue.Workflow("receipts")
        flow.step(send_receipt, 1)
        workflow_id = txqueue.enqueue_workflow(conn, flow)
        print(txqueue.get_workflow(conn, workflow_id).state)  # running
        ```
        """
        return run(getting(task_id_of(workflow_id)), bind(conn, self._store))

    async def get_workflow_async(self, conn: object, workflow_id: uuid.UUID | str) -> WorkflowInfo:
        """``get_workflow`` on an asyncio connection.

        Example:

        ```python
        flow = txqueue.Workflow("receipts")
        flow.step(send_receipt, 1)
        workflow_id = await txqueue.enqueue_workflow_async(conn, flow)
        info = await txqueue.get_workflow_async(conn, workflow_id)
        ```
        """
        plan = getting(task_id_of(workflow_id))
        return await run_async(plan, await bind_async(conn, self._store))

    def list_workflows(
        self,
        conn: object,
        *,
        state: str | Sequence[str] | None = None,
        name: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        limit: int = 50,
        before: uuid.UUID | str | None = None,
    ) -> list[WorkflowSummary]:
        """Workflows newest first, each with its state and how many of its steps are in
        each state: up to ``limit``, below the workflow ``before`` (the last id of the page
        before). Only those in ``state`` (one of running, succeeded, failed, cancelled, or
        a list of them), named ``name``, created from ``created_after`` (included) to
        ``created_before`` (not), aware datetimes; each None: any. A workflow's state is
        read from its steps, so a search by state reads the steps of every workflow it
        passes over. ``conn``: any connection ``enqueue`` takes.

        Example:

        ```python
        flow = txqueue.Workflow("receipts")
        flow.step(send_receipt, 1)
        txqueue.enqueue_workflow(conn, flow)
        page = txqueue.list_workflows(conn, state="running", limit=50)
        while page:
            for summary in page:
                print(summary.id, summary.name, summary.steps["pending"])  # ... receipts 1
            page = txqueue.list_workflows(conn, state="running", before=page[-1].id)
        ```
        """
        plan = listing(*_search(state, name, created_after, created_before, limit, before))
        return run(plan, bind(conn, self._store))

    async def list_workflows_async(
        self,
        conn: object,
        *,
        state: str | Sequence[str] | None = None,
        name: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        limit: int = 50,
        before: uuid.UUID | str | None = None,
    ) -> list[WorkflowSummary]:
        """``list_workflows`` on an asyncio connection.

        Example:

        ```python
        failed = await txqueue.list_workflows_async(conn, state="failed", limit=20)
        ```
        """
        plan = listing(*_search(state, name, created_after, created_before, limit, before))
        return await run_async(plan, await bind_async(conn, self._store))

    def cancel_workflow(
        self, conn: object, workflow_id: uuid.UUID | str, *, by: str | None = None
    ) -> int:
        """Cancel every step of the workflow that has not ended, in the caller's transaction:
        waiting and pending steps end ``cancelled``, running ones are asked to stop (as
        ``cancel``). Returns how many steps it changed (0 for a workflow that had ended);
        TaskNotFoundError if there is no such workflow. ``by`` names who asked.

        Example:

        ```python
        flow = txqueue.Workflow("receipts")
        flow.step(send_receipt, 1)
        workflow_id = txqueue.enqueue_workflow(conn, flow)
        print(txqueue.cancel_workflow(conn, workflow_id, by="ops"))  # 1: its steps not ended
        ```
        """
        return run(cancelling(task_id_of(workflow_id), by), bind(conn, self._store))

    async def cancel_workflow_async(
        self, conn: object, workflow_id: uuid.UUID | str, *, by: str | None = None
    ) -> int:
        """``cancel_workflow`` on an asyncio connection.

        Example:

        ```python
        flow = txqueue.Workflow("receipts")
        flow.step(send_receipt, 1)
        workflow_id = await txqueue.enqueue_workflow_async(conn, flow)
        await txqueue.cancel_workflow_async(conn, workflow_id)
        ```
        """
        plan = cancelling(task_id_of(workflow_id), by)
        return await run_async(plan, await bind_async(conn, self._store))

    def wait_workflow(
        self, conn_or_url: Any, workflow_id: uuid.UUID | str, timeout: float | None = None
    ) -> WorkflowInfo:
        """Block until every step of the workflow has ended (succeeded, failed or cancelled)
        and return it; its ``results`` are its final steps'. ``conn_or_url`` as for ``wait``.
        Raises WaitTimeoutError after ``timeout`` seconds, TaskNotFoundError if there is no
        such workflow.

        Example:

        ```python
        from txqueue.testing import run_tasks

        flow = txqueue.Workflow("receipts")
        flow.step(send_receipt, 1)
        workflow_id = txqueue.enqueue_workflow(conn, flow)
        conn.commit()
        run_tasks(registry, url)  # here; in production, the workers
        print(txqueue.wait_workflow(url, workflow_id, timeout=30).state)  # succeeded
        ```
        """

        def answer(ask: Ask) -> Any:
            if ask[0] == "read":
                return self._read(conn_or_url, ask[1])
            step, left = ask[1]
            return wait_by(conn_or_url, step, left, self._store)

        return drive(awaiting(task_id_of(workflow_id), timeout), answer)

    async def wait_workflow_async(
        self, conn_or_url: Any, workflow_id: uuid.UUID | str, timeout: float | None = None
    ) -> WorkflowInfo:
        """``wait_workflow`` for asyncio.

        Example:

        ```python
        import asyncio

        from txqueue.testing import run_tasks

        flow = txqueue.Workflow("receipts")
        flow.step(send_receipt, 1)
        workflow_id = await txqueue.enqueue_workflow_async(conn, flow)
        await conn.commit()
        await asyncio.to_thread(run_tasks, registry, url)  # here; in production, the workers
        info = await txqueue.wait_workflow_async(url, workflow_id, timeout=30)
        ```
        """

        async def answer(ask: Ask) -> Any:
            if ask[0] == "wait":
                step, left = ask[1]
                return await wait_async_by(conn_or_url, step, left, self._store)
            if isinstance(conn_or_url, str):
                return await asyncio.to_thread(self._read, conn_or_url, ask[1])
            return await self.get_workflow_async(conn_or_url, ask[1])

        return await drive_async(awaiting(task_id_of(workflow_id), timeout), answer)

    def _read(self, conn_or_url: Any, wid: uuid.UUID) -> WorkflowInfo:
        if not isinstance(conn_or_url, str):
            return self.get_workflow(conn_or_url, wid)
        url = config.database_url(conn_or_url)
        store = serving(url, self._store)
        conn = store.connect(url, application_name="txqueue-wait")
        try:
            return _found(wid, store.get_workflow(conn, wid))
        finally:
            conn.close()


def getting(wid: uuid.UUID) -> Plan[WorkflowInfo]:
    """The workflow ``wid``; TaskNotFoundError if there is none."""
    info: WorkflowInfo | None = yield call(Manage.get_workflow, wid)
    return _found(wid, info)


def listing(
    search: WorkflowSearch, before: uuid.UUID | None, limit: int
) -> Plan[list[WorkflowSummary]]:
    """Up to ``limit`` workflows matching ``search``, below the workflow ``before``, newest
    first."""
    found: list[WorkflowSummary] = yield call(Manage.list_workflows, search, before, limit)
    return found


def cancelling(wid: uuid.UUID, by: str | None) -> Plan[int]:
    """Cancel the steps of the workflow ``wid`` that have not ended; how many changed.
    TaskNotFoundError if there is no such workflow."""
    written: dict[uuid.UUID, str] = yield call(Manage.cancel_workflow, wid, check_by(by))
    if not written:
        yield from getting(wid)
    return len(written)


def awaiting(wid: uuid.UUID, timeout: float | None) -> Generator[Ask, Any, WorkflowInfo]:
    """Read the workflow until every step has ended, waiting between reads for the step
    likeliest to end last; the workflow. WaitTimeoutError once ``timeout`` is up."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        info: WorkflowInfo = yield ("read", wid)
        step = _open_step(info, timeout, deadline)
        if step is None:
            return info
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        yield ("wait", (step, left))


def _open_step(
    info: WorkflowInfo, timeout: float | None, deadline: float | None
) -> uuid.UUID | None:
    """The step to wait for next: the last declared of those not ended (the likeliest to
    end last); None when all have ended. WaitTimeoutError once the time is up."""
    open_steps = [s for s in info.steps if s.state not in FINISHED]
    if not open_steps:
        return None
    if deadline is not None and time.monotonic() >= deadline:
        raise WaitTimeoutError(
            f"workflow {info.id} has {len(open_steps)} steps not ended after {timeout:g}s",
            RUNNING_FLOW,
        )
    return open_steps[-1].id


def _found(wid: uuid.UUID, info: WorkflowInfo | None) -> WorkflowInfo:
    if info is None:
        raise TaskNotFoundError(f"no workflow {wid} (never enqueued, rolled back, or pruned)")
    return info


def _search(
    state: str | Sequence[str] | None,
    name: str | None,
    created_after: datetime | None,
    created_before: datetime | None,
    limit: int,
    before: uuid.UUID | str | None,
) -> tuple[WorkflowSearch, uuid.UUID | None, int]:
    """``list_workflows``' arguments, checked: ``listing``'s."""
    check_limit(limit)
    search = workflow_search(state, name, created_after, created_before)
    return search, page_start(before, "workflow"), limit
