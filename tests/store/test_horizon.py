"""vacuum_horizon: what holds the database's vacuum horizon back, oldest first. What needs
the server's settings or roles changed (prepared transactions, slots, a standby, a role
without pg_monitor) runs on a private cluster: tests/integration/test_vacuum_horizon.py."""

from __future__ import annotations

import time

import pytest

from tests.integration.helpers import held_open
from txqueue.store.reports import HOLDER_BACKEND
from txqueue.testing.conformance import StoreCase, near

NO_HORIZON = "SQLite keeps no dead row versions for readers: it has no vacuum horizon"


def test_with_nothing_held_open_nothing_holds_it_back(s: StoreCase) -> None:
    # The server's other sessions are in other databases (each test has its own), and
    # the reading's own session is left out: this database's horizon is free.
    assert s.store.vacuum_horizon(s.conn) is None


@pytest.mark.unsupported(sqlite=NO_HORIZON)
def test_a_session_idle_in_a_transaction_is_named(s: StoreCase) -> None:
    with held_open(s.url, "billing-report") as pid:
        time.sleep(1.1)
        held = s.store.vacuum_horizon(s.conn)
    assert held is not None
    assert (held.kind, held.pid, held.application) == (HOLDER_BACKEND, pid, "billing-report")
    assert (held.user, held.client) == ("postgres", "127.0.0.1")
    assert (held.state, held.backend_type) == ("idle in transaction", "client backend")
    assert held.seconds is not None and 1.0 <= held.seconds < 60
    assert held.since is not None and near(held.since, s.now(), within=60)
    assert held.xid_age >= 1 and held.xmin.isdigit()
    assert s.store.vacuum_horizon(s.conn) is None  # rolled back: released


@pytest.mark.unsupported(sqlite=NO_HORIZON)
def test_the_oldest_of_two_is_named(s: StoreCase) -> None:
    with held_open(s.url, "first") as first, held_open(s.url, "second"):
        held = s.store.vacuum_horizon(s.conn)
        assert held is not None and (held.pid, held.application) == (first, "first")
    with held_open(s.url, "second") as second:  # then the other, alone
        held = s.store.vacuum_horizon(s.conn)
        assert held is not None and held.pid == second
