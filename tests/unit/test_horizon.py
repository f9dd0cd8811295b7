"""The vacuum horizon read as txqueue tells it: ages (a lower bound where the database keeps
no time), the line naming the culprit, the threshold and its setting, and one warning
when it is passed and one when it clears. No services: readings are built by hand."""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

import txqueue
from txqueue import config
from txqueue.errors import ConfigError
from txqueue.observability.horizon import Horizon, Watch, estimate, span
from txqueue.store.reports import HOLDER_BACKEND, HOLDER_PREPARED, HOLDER_SLOT, HorizonHolder

SINCE = datetime(2026, 11, 24, 14, 2, 11, tzinfo=UTC)

SESSION = HorizonHolder(
    kind=HOLDER_BACKEND,
    xmin="1234",
    xid_age=52,
    seconds=720.0,
    since=SINCE,
    pid=4321,
    application="psql",
    user="alice",
    client="10.0.0.7",
    state="idle in transaction",
    backend_type="client backend",
    name=None,
    active=None,
)
# What a role without pg_read_all_stats sees of another user's session.
HIDDEN = replace(SESSION, seconds=None, since=None, client=None, state=None, backend_type=None)
WALSENDER = replace(
    SESSION,
    seconds=None,
    since=None,
    application="standby1",
    user="replicator",
    state="active",
    backend_type="walsender",
)
NOTHING_ELSE = HorizonHolder(HOLDER_SLOT, "1", 1, *[None] * 10)
SLOT = replace(NOTHING_ELSE, xmin="900", xid_age=1_234_567, name="standby1", active=False)
PREPARED = replace(
    NOTHING_ELSE,
    kind=HOLDER_PREPARED,
    xmin="1000",
    xid_age=10,
    seconds=3 * 3600 + 5 * 60,
    since=SINCE,
    user="bob",
    name="pay-17",
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_is_named_with_its_application_user_state_and_time() -> None:
    h = estimate(SESSION)
    assert (h.seconds, h.at_least) == (720.0, False)
    assert h.describe() == (
        "pid 4321 (psql, user alice, from 10.0.0.7, idle in transaction, "
        "open since 14:02:11 UTC, 12 min)"
    )


def test_what_pg_stat_activity_hides_is_left_out_and_the_time_is_a_lower_bound() -> None:
    assert estimate(HIDDEN, seen_for=360.0).describe() == (
        "pid 4321 (psql, user alice, details hidden without pg_monitor, "
        "holding xmin for at least 6 min)"
    )
    assert (
        estimate(replace(HIDDEN, application=""))
        .describe()
        .startswith("pid 4321 (no application name, user alice,")
    )


def test_a_walsender_is_a_standbys_feedback() -> None:
    assert estimate(WALSENDER, seen_for=90.0).describe() == (
        "pid 4321 (standby1, user replicator, from 10.0.0.7, "
        "walsender: a standby's feedback holding xmin for at least 1 min)"
    )


def test_a_slot_and_a_prepared_transaction() -> None:
    assert estimate(SLOT, seen_for=400.0).describe() == (
        "replication slot 'standby1' (inactive) holding xmin for at least 6 min"
    )
    active = replace(SLOT, active=True, pid=77)
    assert "(active, pid 77)" in estimate(active, 400.0).describe()
    assert estimate(PREPARED).describe() == (
        "prepared transaction 'pay-17' (owner bob) since 14:02:11 UTC, 3 h 5 min"
    )


def test_a_single_reading_of_what_keeps_no_time_gives_how_far_back_it_holds() -> None:
    h = estimate(SLOT)
    assert (h.seconds, h.at_least) == (0.0, True)
    assert h.describe() == (
        "replication slot 'standby1' (inactive) holding xmin 1,234,567 transactions back"
    )


def test_nothing_held() -> None:
    assert estimate(None) == Horizon()
    assert Horizon().describe() == "nothing holds it back"
    assert not Horizon().past(1.0)


def test_past_the_threshold_and_zero_never_is() -> None:
    h = estimate(SESSION)  # 720 s
    assert h.past(720.0) and h.past(300.0)
    assert not h.past(721.0)
    assert not h.past(0.0)


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0.4, "0 s"), (59.9, "59 s"), (60, "1 min"), (3599, "59 min"), (3600, "1 h 0 min"),
     (86400 + 7200, "1 d 2 h")],
)  # fmt: skip
def test_span(seconds: float, said: str) -> None:
    assert span(seconds) == said


def test_a_slot_ages_from_when_this_process_first_saw_it_with_that_xmin() -> None:
    clock = Clock()
    watch = Watch(300.0, logger=None, clock=clock)
    assert watch.see(SLOT).seconds == 0.0
    clock.now += 200
    assert watch.see(SLOT).seconds == 200.0
    clock.now += 200
    assert (watch.current.seconds, watch.current.at_least) == (200.0, True)  # until read
    assert watch.see(SLOT).seconds == 400.0
    moved = replace(SLOT, xmin="950", xid_age=1000)  # the standby caught up a little
    assert watch.see(moved).seconds == 0.0
    clock.now += 10
    assert watch.see(moved).seconds == 10.0
    watch.see(None)  # gone, then back with the same xmin: counted afresh
    clock.now += 10
    assert watch.see(moved).seconds == 0.0
    other = replace(moved, name="standby2")
    clock.now += 10
    assert watch.see(other).seconds == 0.0


def test_a_session_with_a_start_time_is_not_aged_by_the_watch() -> None:
    clock = Clock()
    watch = Watch(300.0, logger=None, clock=clock)
    watch.see(SESSION)
    clock.now += 100
    assert watch.see(SESSION).seconds == 720.0  # the database's time, not the watch's


def test_one_warning_when_it_passes_the_threshold_and_one_when_it_clears(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    watch = Watch(300.0, clock=clock)
    caplog.set_level(logging.INFO, logger="txqueue.horizon")
    young = replace(SESSION, seconds=100.0)
    for seconds in (100.0, 200.0):
        watch.see(replace(young, seconds=seconds))
    assert caplog.records == []
    for seconds in (300.0, 360.0, 420.0, 3600.0):  # every minute past it: still one
        watch.see(replace(young, seconds=seconds))
    [passed] = caplog.records
    assert passed.levelno == logging.WARNING
    message = passed.getMessage()
    assert message.startswith("vacuum horizon held back past 5 min by pid 4321 (psql,")
    assert "idle in transaction" in message and "how-to/vacuum-horizon.md" in message
    caplog.clear()
    watch.see(None)
    watch.see(None)
    [cleared] = caplog.records
    assert cleared.levelno == logging.WARNING
    assert cleared.getMessage() == (
        "vacuum horizon no longer held back past 5 min (nothing holds it back)"
    )
    caplog.clear()
    watch.see(SLOT)  # a slot is young to a watch that has just seen it
    clock.now += 299
    watch.see(SLOT)
    assert caplog.records == []
    clock.now += 1
    watch.see(SLOT)
    assert "replication slot 'standby1' (inactive)" in caplog.records[0].getMessage()


def test_a_threshold_of_zero_never_warns(caplog: pytest.LogCaptureFixture) -> None:
    watch = Watch(0.0)
    watch.see(replace(SESSION, seconds=86400.0 * 30))
    assert caplog.records == []
    assert watch.current.seconds == 86400.0 * 30  # the gauge still tells


def test_the_threshold_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(config.VACUUM_HORIZON_ENV, raising=False)
    assert config.vacuum_horizon_warn() == 300.0
    for given, seconds in (("120", 120.0), ("10m", 600.0), (" 0 ", 0.0), ("", 300.0)):
        monkeypatch.setenv(config.VACUUM_HORIZON_ENV, given)
        assert config.vacuum_horizon_warn() == seconds
    assert config.vacuum_horizon_warn(45) == 45.0  # a value given wins over the variable
    for bad in ("soon", "-5", "inf", "nan", "5 minutes"):
        monkeypatch.setenv(config.VACUUM_HORIZON_ENV, bad)
        named = rf"^TXQUEUE_VACUUM_HORIZON_WARN: .*{re.escape(repr(bad))}$"
        with pytest.raises(ConfigError, match=named):
            config.vacuum_horizon_warn()
    with pytest.raises(ConfigError, match=r"^vacuum_horizon_warn: "):
        config.vacuum_horizon_warn(-1)


def test_workers_and_cleaners_check_the_setting_when_made(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"  # nothing is opened until they run
    registry = txqueue.Registry()
    registry.task("t", queue="q")(lambda payload: None)
    monkeypatch.setenv(config.VACUUM_HORIZON_ENV, "soon")
    with pytest.raises(ConfigError, match=r"^TXQUEUE_VACUUM_HORIZON_WARN: "):
        txqueue.Worker(registry, database_url=url, amqp_url=None)
    with pytest.raises(ConfigError, match=r"^TXQUEUE_VACUUM_HORIZON_WARN: "):
        txqueue.Cleaner(database_url=url, amqp_url=None)
    txqueue.Worker(registry, database_url=url, amqp_url=None, vacuum_horizon_warn=60)
    with pytest.raises(ConfigError, match=r"^vacuum_horizon_warn: "):
        txqueue.Cleaner(database_url=url, amqp_url=None, vacuum_horizon_warn=-1)
