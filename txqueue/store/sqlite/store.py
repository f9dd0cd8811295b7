"""The SQLite store: the same operations as the PostgreSQL store, for one database file
shared by the processes of one machine."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from ..parking import Parking
from .claims import Claims
from .clock import MovedClock
from .connection import Clock, Connection
from .connection import clock as default_clock
from .dashboard import Dashboard
from .enqueue import Enqueue
from .horizon import VacuumHorizon
from .leaders import Leaders
from .manage import DIALECT, Manage
from .presence import Presence
from .queues import Queues
from .schedules import Schedules
from .slots import Slots
from .steps import Steps
from .upkeep import Upkeep
from .workflows import Workflows


# Enqueue comes last: Upkeep and Schedules build on it, so it must follow them in the MRO.
class SqliteStore(
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
    MovedClock,
    Enqueue,
    Workflows,
    Parking[sqlite3.Connection, sqlite3.Connection],
):
    """The same operations as the PostgreSQL store, for one database file shared by the
    processes of one machine.

    SQLite has one writer at a time, so every claim, outcome and recovery is one short
    ``BEGIN IMMEDIATE`` transaction: it takes the write lock first, reads, decides, writes and
    commits, and no other process can claim the same row in between. Connections opened
    here are in autocommit mode, in WAL (readers never wait for the writer), with
    ``synchronous=NORMAL`` and a busy timeout, so a process waiting for the lock waits
    instead of failing with "database is locked". Times are Unix seconds from ``clock``:
    this machine's, moved only by tests that travel in time (the default, when
    none is given: ``connection.clock``).
    """

    dialect = DIALECT

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = default_clock if clock is None else clock


if TYPE_CHECKING:
    from ..protocols import Store

    _check: Store[sqlite3.Connection, sqlite3.Connection] = SqliteStore()
