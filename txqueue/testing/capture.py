"""What a block of code enqueued: the tasks committed meanwhile, read from the database,
so a rolled-back transaction shows up as nothing enqueued (in a test's transaction, given
its connection: the tasks added to it meanwhile)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..core.stored import TaskInfo
from ..tasks.definition import TaskDefinition
from .database import DatabaseOrConnection, Session, session

_ALL = 100_000


class Enqueued:
    """The tasks committed during a ``captured`` block, oldest first (filled when the
    block ends).

    Example:

    ```python
    import psycopg

    from txqueue.testing import captured

    with captured(url) as enqueued:  # an Enqueued
        with psycopg.connect(url) as other:
            send_receipt.enqueue(other, order=42)
    found = enqueued.assert_enqueued(send_receipt, order=42)
    print(found.queue, [t.name for t in enqueued.tasks])  # emails ['send_receipt']
    ```
    """

    def __init__(self) -> None:
        self.tasks: list[TaskInfo] = []

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[TaskInfo]:
        return iter(self.tasks)

    def of(self, task: TaskDefinition[Any, Any] | str) -> list[TaskInfo]:
        """The captured tasks of ``task`` (a definition, or a name)."""
        name = task if isinstance(task, str) else task.name
        return [t for t in self.tasks if t.name == name]

    def assert_enqueued(
        self, task: TaskDefinition[Any, Any] | str, /, *args: Any, **kwargs: Any
    ) -> TaskInfo:
        """The one captured task of ``task`` stored with these arguments (as its enqueue
        with them would store them; none given: any arguments); AssertionError, listing
        what was captured, if there is not exactly one."""
        found = self.of(task)
        if isinstance(task, TaskDefinition) and (args or kwargs):
            stored = task.task(*args, **kwargs).payload
            found = [t for t in found if t.payload == stored]
        if len(found) != 1:
            name = task if isinstance(task, str) else task.name
            seen = [(t.name, t.payload) for t in self.tasks] or "nothing"
            raise AssertionError(
                f"expected one task {name} with {args or ''}{kwargs or ''}, "
                f"found {len(found)}; enqueued: {seen}"
            )
        return found[0]

    def assert_nothing(self) -> None:
        """AssertionError if any task was committed during the block."""
        if self.tasks:
            raise AssertionError(f"expected nothing enqueued, found {self.tasks}")


@contextmanager
def captured(database: DatabaseOrConnection) -> Iterator[Enqueued]:
    """Collect the tasks committed in ``database`` (a URL, or an App) while the block runs,
    by any connection: a test database is the test's own. Given a connection instead
    (Django's in a ``TestCase``), the tasks its transaction sees added meanwhile: the
    test's own, which no other connection sees before Django rolls them back.

    Example:

    ```python
    import psycopg

    from txqueue.testing import captured

    with captured(url) as enqueued:
        with psycopg.connect(url) as other:  # the code under test commits
            send_receipt.enqueue(other, order=42)
    enqueued.assert_enqueued(send_receipt, order=42)
    ```
    """
    enqueued = Enqueued()
    with session(database, "txqueue-testing") as on:
        before = {t.id for t in _all(on)}
        yield enqueued
        new = [t for t in _all(on) if t.id not in before]
    enqueued.tasks = sorted(new, key=lambda t: t.id)


def _all(on: Session) -> list[TaskInfo]:
    return list(on.store.list_tasks(on.conn, state=None, queue=None, name=None, limit=_ALL))
