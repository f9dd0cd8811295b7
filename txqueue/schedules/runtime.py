"""Periodic schedules at run time, on the application's connection: create, change, pause,
resume and delete them, and read them beside those declared in code.

Like ``enqueue``, each call runs in the caller's transaction and never commits for it. A
schedule is a row of ``txqueue_schedules``; every worker of its queue reads the rows at
least once a second and keeps each one as it keeps those declared with
``registry.periodic``: each slot enqueued once across every worker and host.

``ScheduleControl`` does the work through one configuration's store: an App's (it is
one, and checks a schedule's payload against its registry's handler), or the
process-wide defaults behind the module-level functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from types import EllipsisType
from typing import TYPE_CHECKING, Any, Final

from ..core.task import DEFAULT_QUEUE
from ..errors import (
    InvalidTypeError,
    InvalidValueError,
    ScheduleNotFoundError,
    StoreError,
    TaskArgumentsError,
)
from ..store.connections import bind
from ..store.protocols import Schedules
from ..store.records import ScheduleRow
from ..store.roles import InTransaction
from .info import ScheduleInfo, info
from .periodic import Schedule

if TYPE_CHECKING:
    from ..tasks.registry import Registry

CODE: Final = "code"
RUNTIME: Final = "runtime"
_TRIES = 5  # reads of a schedule a change makes while workers keep enqueuing its slots


class ScheduleControl:
    """The schedule calls, through ``_store`` (None: the process's defaults)."""

    _store: InTransaction[Any] | None = None
    _registry: Registry | None = None

    def __init__(self, registry: Registry | None = None) -> None:
        """``registry``: a schedule's payload is checked against its task's handler
        there, when it has the task."""
        self._registry = registry

    def create_schedule(
        self,
        conn: object,
        name: str,
        *,
        cron: str,
        task: str,
        queue: str = DEFAULT_QUEUE,
        payload: Any = None,
        timezone: str = "UTC",
        catch_up: bool = False,
        paused: bool = False,
    ) -> ScheduleInfo:
        """Enqueue ``task`` (with ``payload``, its arguments by name, on ``queue``) at each slot
        of ``cron`` in ``timezone``, from the next slot on, as ``registry.periodic`` does; kept
        by the workers of ``queue`` from their next look (within a second of the commit).
        InvalidValueError naming ``name`` if a schedule has it. Needs the ``periodic`` extra.

        Example:

        ```python
        txqueue.create_schedule(
            conn,
            "weekly_receipts",
            cron="0 8 * * mon",
            timezone="Europe/Paris",
            task="send_receipt",
            queue="emails",
            payload={"order": 0},
        )
        ```
        """
        schedule = self._checked(name, cron, task, queue, payload, timezone, catch_up)
        if not isinstance(paused, bool):
            raise InvalidTypeError("paused", "must be a bool")
        bound = bind(conn, self._store)
        now = bound(Schedules.now)
        latest = schedule.latest(now)
        row = ScheduleRow(
            name, task, queue, cron, timezone, latest, payload, catch_up, paused, RUNTIME
        )
        if not bound(Schedules.add_schedule, row):
            raise InvalidValueError("name", f"a schedule named {name!r} exists")
        return info(row)

    def change_schedule(
        self,
        conn: object,
        name: str,
        *,
        cron: str | EllipsisType = ...,
        task: str | EllipsisType = ...,
        queue: str | EllipsisType = ...,
        payload: Any = ...,
        timezone: str | EllipsisType = ...,
        catch_up: bool | EllipsisType = ...,
    ) -> ScheduleInfo:
        """Change a schedule made at run time; a field left out stays as it is. A new ``cron``
        or ``timezone`` starts at its next slot. One declared in code is changed in the code:
        InvalidValueError naming ``name``.

        Example:

        ```python
        txqueue.create_schedule(conn, "nightly", cron="0 3 * * *", task="send_receipt")
        txqueue.change_schedule(conn, "nightly", cron="0 4 * * *")  # the rest stays as it was
        ```
        """
        given = {"cron": cron, "task": task, "queue": queue, "payload": payload}
        given |= {"timezone": timezone, "catch_up": catch_up}

        def change(old: ScheduleRow, now: Callable[[], datetime]) -> ScheduleRow:
            if old.source != RUNTIME:
                raise InvalidValueError(
                    "name", f"schedule {name!r} is declared in code: change it there (or pause it)"
                )
            new = replace(old, **{k: v for k, v in given.items() if v is not ...})
            schedule = self._checked(
                name, new.cron, new.task, new.queue, new.payload, new.timezone, new.catch_up
            )
            if (new.cron, new.timezone) == (old.cron, old.timezone):
                return new
            # As a changed schedule in code: from the new expression's latest slot, so that
            # its last slot before now does not count as missed.
            return replace(new, last_slot=max(old.last_slot, schedule.latest(now())))

        return self._update(conn, name, change)

    def pause_schedule(self, conn: object, name: str) -> ScheduleInfo:
        """Stop a schedule (either kind) enqueuing, from the commit on; it stays paused across
        deploys and worker restarts until resumed.

        Example:

        ```python
        txqueue.create_schedule(conn, "nightly", cron="0 3 * * *", task="send_receipt")
        txqueue.pause_schedule(conn, "nightly")  # paused across deploys, until resumed
        ```
        """
        return self._update(conn, name, lambda row, now: replace(row, paused=True))

    def resume_schedule(self, conn: object, name: str) -> ScheduleInfo:
        """Start a paused schedule again at its next slot: the slots that passed while it was
        paused are skipped, even with ``catch_up``.

        Example:

        ```python
        txqueue.create_schedule(conn, "nightly", cron="0 3 * * *", task="send_receipt", paused=True)
        txqueue.resume_schedule(conn, "nightly")  # from its next slot
        ```
        """

        def resume(row: ScheduleRow, now: Callable[[], datetime]) -> ScheduleRow:
            if not row.paused:
                return row
            # The slots that passed while paused are skipped, catch_up or not.
            latest = _schedule(row).latest(now())
            return replace(row, paused=False, last_slot=max(row.last_slot, latest))

        return self._update(conn, name, resume)

    def delete_schedule(self, conn: object, name: str) -> None:
        """Delete a schedule. One still declared in code comes back at the next look of a
        worker that declares it: pause that one instead.

        Example:

        ```python
        txqueue.create_schedule(conn, "once_a_day", cron="0 3 * * *", task="send_receipt")
        txqueue.delete_schedule(conn, "once_a_day")
        ```
        """
        bound = bind(conn, self._store)
        if not bound(Schedules.delete_schedule, _name(name)):
            raise ScheduleNotFoundError(f"no schedule named {name!r}")

    def get_schedule(self, conn: object, name: str) -> ScheduleInfo:
        """One schedule; ScheduleNotFoundError if none has that name.

        Example:

        ```python
        txqueue.create_schedule(conn, "nightly", cron="0 3 * * *", task="send_receipt")
        print(txqueue.get_schedule(conn, "nightly").next_run)
        ```
        """
        bound = bind(conn, self._store)
        row = bound(Schedules.get_schedule, _name(name))
        if row is None:
            raise ScheduleNotFoundError(f"no schedule named {name!r}")
        return info(row)

    def list_schedules(self, conn: object) -> list[ScheduleInfo]:
        """Every schedule, of either kind, by name.

        Example:

        ```python
        txqueue.create_schedule(conn, "nightly", cron="0 3 * * *", task="send_receipt")
        print([s.name for s in txqueue.list_schedules(conn)])  # ['nightly']
        ```
        """
        bound = bind(conn, self._store)
        return [info(row) for row in bound(Schedules.list_schedules)]

    def _update(
        self,
        conn: object,
        name: str,
        change: Callable[[ScheduleRow, Callable[[], datetime]], ScheduleRow],
    ) -> ScheduleInfo:
        """Read the schedule, change it, and write it back if it is still as read, else
        again from a fresh read: on a connection in autocommit too, a slot a worker
        enqueued meanwhile is never set back to be enqueued twice, nor another change
        undone."""
        bound = bind(conn, self._store)
        for _ in range(_TRIES):
            old = bound(Schedules.get_schedule, _name(name), lock=True)
            if old is None:
                raise ScheduleNotFoundError(f"no schedule named {name!r}")
            new = change(old, lambda: bound(Schedules.now))
            if new == old or bound(Schedules.write_schedule, new, old):
                return info(new)
        raise StoreError(f"schedule {name!r}: its workers kept moving it; try again")

    def _checked(
        self,
        name: str,
        cron: str,
        task: str,
        queue: str,
        payload: Any,
        timezone: str,
        catch_up: bool,
    ) -> Schedule:
        schedule = Schedule(name, cron, task, queue, payload, timezone, catch_up)
        definition = None if self._registry is None else self._registry.get(task)
        if definition is not None:  # each slot's task would fail at once on it
            try:
                definition.signature.load({} if payload is None else payload)
            except TaskArgumentsError as exc:
                raise InvalidValueError("payload", str(exc)) from None
        return schedule


def _schedule(row: ScheduleRow) -> Schedule:
    return Schedule(row.name, row.cron, row.task, row.queue, row.payload, row.timezone)


def _name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidValueError("name", f"must be a schedule's name, not {name!r}")
    return name
