"""What each part of a worker and the tools use of a store (``protocols``), so that each
holds no more of it than it calls; ``Store``, and so each store class, satisfies every one."""

from __future__ import annotations

from typing import Protocol

from .protocols import (
    A_contra,
    C,
    Claims,
    Clocks,
    Connections,
    DashboardReads,
    Enqueue,
    Journals,
    Manage,
    Notifies,
    Presence,
    Queues,
    Schedules,
    Slots,
    Upkeep,
    VacuumHorizon,
    Waits,
)


class Recording(Connections[C], Claims[C], Journals[C], Clocks[C], Protocol[C]):
    """The worker's recorder and its handler threads' connections: outcomes, atomic tasks'
    successes and steps, on connections of their own."""


class Keeping(Connections[C], Claims[C], Presence[C], Slots[C], VacuumHorizon[C], Protocol[C]):
    """The worker's lease keeper: leases, its presence, the slots and the vacuum horizon."""


class Recovering(Connections[C], Upkeep[C], Protocol[C]):
    """A worker's own look for expired leases, on its lease keeper's connection."""


class Reading(Connections[C], Manage[C], Queues[C], Protocol[C]):
    """Tools reading what the queues hold on txqueue's own connections: the metrics, the
    demo."""


class Waiting(Connections[C], Waits[C], Manage[C], Protocol[C]):
    """``txqueue.wait`` on a connection of its own."""


class Browsing(Connections[C], DashboardReads[C], Queues[C], VacuumHorizon[C], Protocol[C]):
    """The dashboard."""


class Notifying(Connections[C], Notifies[C], Protocol[C]):
    """The wake-ups by NOTIFY txqueue's own processes send, on a connection of their own."""


class InTransaction(
    Enqueue[A_contra], Manage[A_contra], Queues[A_contra], Schedules[A_contra], Protocol[A_contra]
):
    """What the calls on the application's connection use, in its transaction: enqueue,
    the management calls, the queues' settings, the schedules (``connections.bind``)."""
