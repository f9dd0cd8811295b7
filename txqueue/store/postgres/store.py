"""The PostgreSQL store: one class of the statements in ``queries.sql``, made of a part per
caller (the protocols of ``store.protocols``).

Connections opened here are in autocommit mode: each statement is its own short
transaction, and nothing holds a row lock while a task runs. The hot statements (a claim,
a batch of outcomes) are one statement each, in one round trip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..parking import Parking
from .claims import Claims
from .clock import MovedClock
from .connection import Caller, Connection, PgConnection
from .dashboard import Dashboard
from .horizon import VacuumHorizon
from .leaders import Leaders
from .manage import DIALECT, Manage
from .naming import Naming
from .payload_index import PayloadIndex
from .presence import Presence
from .queues import Queues
from .schedules import Schedules
from .slots import Slots
from .steps import Steps
from .upkeep import Upkeep
from .workflows import Workflows

if TYPE_CHECKING:
    from ..protocols import Store
    from ..roles import Browsing, Reading, Waiting


class PostgresStore(
    Connection,
    Claims,
    Upkeep,
    Manage,
    Queues,
    Presence,
    Schedules,
    Leaders,
    Dashboard,
    VacuumHorizon,
    Slots,
    Steps,
    PayloadIndex,
    Workflows,
    MovedClock,
    Naming,
    Parking[PgConnection, Caller],
):
    """txqueue's statements on PostgreSQL: ``connect`` gives txqueue's own connections, and
    the enqueue and management methods also take an application's (``Caller``)."""

    dialect = DIALECT

    def _rows(self, conn: Any, name: str, params: Any) -> list[Any]:
        # The filtered reads are never prepared: a plan made for the filter's values drops
        # the conditions whose parameter is NULL and can use an index (the payload's, or
        # the primary key's for the order); psycopg's automatic preparing would settle,
        # after five calls, on a generic plan that must scan for any of them.
        prepare = False if name in _FILTERED else None
        return list(conn.execute(self.dialect.queries[name], params, prepare=prepare).fetchall())


_FILTERED = frozenset(("find_tasks", "count_tasks", "pick_tasks"))


if TYPE_CHECKING:
    _satisfies: Store[PgConnection, Caller] = PostgresStore()
    # The tools that read on txqueue's own connection: a caller's methods take it too.
    _reading: Reading[PgConnection] = PostgresStore()
    _waiting: Waiting[PgConnection] = PostgresStore()
    _browsing: Browsing[PgConnection] = PostgresStore()
