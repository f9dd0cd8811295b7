"""The PostgreSQL store: one class of the statements in ``queries.sql``, made of a part per
caller (the protocols of ``store.protocols``).

Connections opened here are in autocommit mode: each statement is its own short
transaction, and nothing holds a row lock while a task runs. The hot statements (a claim,
a batch of outcomes) are one statement each, in one round trip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .claims import Claims
from .connection import Caller, Connection, PgConnection
from .dashboard import Dashboard
from .leaders import Leaders
from .manage import Manage
from .presence import Presence
from .schedules import Schedules
from .upkeep import Upkeep

if TYPE_CHECKING:
    from ..protocols import Store


class PostgresStore(Connection, Claims, Upkeep, Manage, Presence, Schedules, Leaders, Dashboard):
    """txqueue's statements on PostgreSQL: ``connect`` gives txqueue's own connections, and
    the enqueue and management methods also take an application's (``Caller``)."""


if TYPE_CHECKING:
    _satisfies: Store[PgConnection, Caller] = PostgresStore()
