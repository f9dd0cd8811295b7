"""The bound store: a call names the protocol's method and passes no connection; the store
gets its bound connection first, and mypy checks the method against the protocol the
holder's ``Bound`` is typed by."""

from __future__ import annotations

import asyncio
import sqlite3
import textwrap
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

from mypy import api

from txqueue.store.bound import AsyncBound, Bound
from txqueue.store.connections import bind
from txqueue.store.protocols import Manage, Queues


class Recording:
    """A store that answers every call with what it was given."""

    def get_task(self, conn: object, task_id: uuid.UUID) -> tuple[object, uuid.UUID]:
        return conn, task_id

    async def queue_settings(self, conn: object) -> list[object]:
        return [conn]


def test_a_bound_call_takes_no_connection_and_the_store_gets_the_bound_one() -> None:
    tid = uuid.uuid4()
    bound: Bound[Any] = Bound("conn", None, "conn", False, Recording())
    assert bound(Manage.get_task, tid) == ("conn", tid)
    aio = AsyncBound("aconn", None, "aconn", False, Recording())  # type: ignore[arg-type]
    assert asyncio.run(aio(Queues.queue_settings)) == ["aconn"]


def test_bind_picks_the_store_of_the_connection_kind() -> None:
    with closing(sqlite3.connect(":memory:")) as conn:
        bound = bind(conn)
        assert (bound.conn, bound.key, bound.managed) == (conn, conn, False)
        assert type(bound.store).__name__ == "SqliteStore"


HOLDER = """
    import uuid
    from typing import Any

    from txqueue.store.bound import Bound
    from txqueue.store.protocols import Claims, Manage
    from txqueue.store.roles import InTransaction

    def read(bound: Bound[InTransaction[Any]], tid: uuid.UUID) -> None:
        found: int = bound(Manage.get_task, tid)
        bound(Manage.get_task, "not an id")
        bound(Claims.claim_ids, [tid], "w", None)
"""


def test_mypy_checks_a_bound_call_by_the_protocol(tmp_path: Path) -> None:
    module = tmp_path / "holder.py"
    module.write_text(textwrap.dedent(HOLDER))
    out, err, status = api.run(
        ["--strict", "--config-file", "", "--cache-dir", str(tmp_path / ".mypy_cache"), str(module)]
    )
    assert err == "", err
    assert status == 1, out
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 3, out
    returns, argument, protocol = errors
    assert '"TaskInfo | None"' in returns and '"int"' in returns
    assert "UUID], TaskInfo | None]" in argument and "Any, str], TaskInfo" in argument
    assert "Callable[[InTransaction[Any], Any, list[UUID]" in protocol
