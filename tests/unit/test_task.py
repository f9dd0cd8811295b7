"""Task validation, ids, backoff, messages and URLs: no services needed."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest

import txqueue
from txqueue import Task, config
from txqueue.core.ids import uuid7
from txqueue.core.stored import timeline
from txqueue.core.task import backoff_delay
from txqueue.outbox import client, wakeup
from txqueue.store.records import Inserted
from txqueue.store.sql import migrations, schema_text


@pytest.mark.parametrize(
    ("kwargs", "error", "field"),
    [
        ({"name": ""}, txqueue.InvalidValueError, "name"),
        ({"name": 5}, txqueue.InvalidTypeError, "name"),
        ({"payload": {"x": object()}}, txqueue.InvalidValueError, "payload"),
        ({"payload": float("nan")}, txqueue.InvalidValueError, "payload"),
        ({"payload": "a\x00b"}, txqueue.InvalidValueError, "payload"),
        ({"payload": {"k": ["\ud800"]}}, txqueue.InvalidValueError, "payload"),
        ({"payload": {1: "a"}}, txqueue.InvalidValueError, "payload"),
        ({"payload": [{"a": {None: 1}}]}, txqueue.InvalidValueError, "payload"),
        ({"queue": "has space"}, txqueue.InvalidValueError, "queue"),
        ({"queue": "x" * 101}, txqueue.InvalidValueError, "queue"),
        ({"queue": None}, txqueue.InvalidTypeError, "queue"),
        ({"priority": 40000}, txqueue.InvalidValueError, "priority"),
        ({"priority": True}, txqueue.InvalidTypeError, "priority"),
        ({"priority": 1.5}, txqueue.InvalidTypeError, "priority"),
        ({"run_at": datetime(2030, 1, 1)}, txqueue.InvalidValueError, "run_at"),
        ({"run_at": "2030-01-01"}, txqueue.InvalidTypeError, "run_at"),
        ({"delay": -1}, txqueue.InvalidValueError, "delay"),
        ({"delay": "soon"}, txqueue.InvalidTypeError, "delay"),
        ({"delay": 1, "run_at": datetime.now(UTC)}, txqueue.InvalidValueError, "delay"),
        ({"max_attempts": 0}, txqueue.InvalidValueError, "max_attempts"),
        ({"max_attempts": 1001}, txqueue.InvalidValueError, "max_attempts"),
        ({"timeout": 0}, txqueue.InvalidValueError, "timeout"),
        ({"timeout": 0.5}, txqueue.InvalidValueError, "timeout"),
        ({"timeout": 1e300}, txqueue.InvalidValueError, "timeout"),
        ({"timeout": "30"}, txqueue.InvalidTypeError, "timeout"),
        ({"unique_key": ""}, txqueue.InvalidValueError, "unique_key"),
        ({"unique_key": 7}, txqueue.InvalidTypeError, "unique_key"),
        ({"expires": 0}, txqueue.InvalidValueError, "expires"),
        ({"expires": timedelta(seconds=-1)}, txqueue.InvalidValueError, "expires"),
        ({"expires": float("inf")}, txqueue.InvalidValueError, "expires"),
        ({"expires": 1e12}, txqueue.InvalidValueError, "expires"),
        ({"expires": "1h"}, txqueue.InvalidTypeError, "expires"),
        ({"expires": True}, txqueue.InvalidTypeError, "expires"),
        ({"expires": datetime(2030, 1, 1)}, txqueue.InvalidValueError, "expires"),
        (
            {
                "expires": datetime(2030, 1, 1, tzinfo=UTC),
                "run_at": datetime(2030, 1, 1, tzinfo=UTC),
            },
            txqueue.InvalidValueError,
            "expires",
        ),
        ({"time_limit": 0}, txqueue.InvalidValueError, "time_limit"),
        ({"time_limit": 1e300}, txqueue.InvalidValueError, "time_limit"),
        ({"time_limit": "2"}, txqueue.InvalidTypeError, "time_limit"),
    ],
)
def test_bad_task_fields_name_the_field(kwargs: dict, error: type, field: str) -> None:
    name = kwargs.pop("name", "ok")
    with pytest.raises(error) as info:
        Task(name, **kwargs)
    assert info.value.field == field
    assert isinstance(info.value, txqueue.TxQueueError)
    assert str(info.value).startswith(f"{field}: ")
    assert isinstance(info.value, ValueError if error is txqueue.InvalidValueError else TypeError)


def test_valid_task_defaults() -> None:
    task = Task("send")
    assert (task.payload, task.queue, task.priority, task.max_attempts) == ({}, "default", 0, None)
    assert Task("send", delay=timedelta(seconds=3)).delay_seconds == 3.0
    assert Task("send", [1, "two", None]).payload_json == '[1,"two",null]'
    payload = {"n": 1}
    task = Task("send", payload)
    payload["n"] = float("nan")  # changed after validation: not what enqueue stores
    assert task.payload_json == '{"n":1}'
    # What only looks like an escaped NUL is an ordinary backslash.
    assert Task("send", "\\u0000").payload_json == '"\\\\u0000"'
    Task("q", queue="A-z_0.9", priority=-32768, max_attempts=1000, timeout=1)
    deadline = datetime(2030, 1, 1, tzinfo=UTC)
    assert (Task("t", expires=deadline).start_by, Task("t", expires=deadline).expires_seconds) == (
        deadline,
        None,
    )
    assert Task("t", expires=timedelta(minutes=1), time_limit=0.5).expires_seconds == 60.0
    assert (Task("t", expires=5).start_by, Task("t", expires=5).expires_seconds) == (None, 5.0)


def test_uuid7_is_version_7_and_time_ordered() -> None:
    ids = [uuid7() for _ in range(1000)]
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids)
    assert len(set(ids)) == 1000
    assert ids == sorted(ids)  # strictly increasing, also within a millisecond


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    first = [backoff_delay(1.0, 1) for _ in range(200)]
    assert min(first) >= 0.5 and max(first) <= 1.5  # the first retry comes within seconds
    assert len({round(d, 6) for d in first}) > 100  # jitter spreads retries
    assert all(4 <= backoff_delay(1.0, 4) <= 12 for _ in range(50))
    assert backoff_delay(1.0, 100) <= 3600 * 1.5
    assert backoff_delay(lambda attempt: attempt * 10, 3) == 30


def test_registry_defaults_and_task_builder() -> None:
    registry = txqueue.Registry()

    @registry.task("send_receipt", queue="emails", max_attempts=7, timeout=30)
    def send_receipt(payload: dict) -> str:
        return "sent"

    @registry.task()
    def with_ctx(payload: dict, ctx: txqueue.TaskContext) -> None: ...

    assert send_receipt({"x": 1}) == "sent"
    task = send_receipt.options(priority=3).task({"order": 42})
    assert (task.name, task.queue, task.payload, task.priority) == (
        "send_receipt",
        "emails",
        {"order": 42},
        3,
    )
    assert not send_receipt.wants_context and with_ctx.wants_context
    assert registry.queues() == ["emails", "default"]
    late = send_receipt.options(expires=30, time_limit=5).task({"order": 1})
    assert (late.expires, late.time_limit, late.queue) == (30, 5, "emails")

    defaults = registry.claim_defaults()
    assert defaults["send_receipt"] == {
        "timeout": 30.0,
        "max_attempts": 7,
        "on_lease_expired": {"policy": "retry"},
    }
    assert defaults["with_ctx"]["timeout"] == 300.0
    with pytest.raises(txqueue.ConfigError, match="registered twice"):
        registry.task("send_receipt")(lambda p: None)
    with pytest.raises(txqueue.InvalidValueError):
        registry.task("x", queue="bad queue")
    with pytest.raises(txqueue.ConfigError, match="context=True"):
        registry.task("ctx_first")(_ctx_first)


def _ctx_first(ctx: txqueue.TaskContext, order: int) -> None: ...


def test_a_registered_start_deadline_and_time_limit_reach_the_claims() -> None:
    registry = txqueue.Registry()

    @registry.task(expires=timedelta(minutes=2), time_limit=10)
    def report() -> None: ...

    @registry.task()
    def plain() -> None: ...

    defaults = registry.claim_defaults()
    assert (defaults["report"]["expires"], defaults["report"]["time_limit"]) == (120.0, 10.0)
    assert "expires" not in defaults["plain"] and "time_limit" not in defaults["plain"]
    for bad, field in (
        ({"expires": datetime.now(UTC)}, "expires"),
        ({"time_limit": -1}, "time_limit"),
    ):
        with pytest.raises(txqueue.ValidationError) as info:
            registry.task("bad", **bad)
        assert info.value.field == field


def test_a_tasks_own_limits_are_checked_when_it_is_registered() -> None:
    registry = txqueue.Registry()

    @registry.task(concurrency_key="account", concurrency_limit=1, rate_limit="10/s")
    def sync(account: int, region: str = "eu") -> None: ...

    @registry.task(rate_limit="600/min", rate_limit_key="region")
    def report(region: str = "eu") -> None: ...

    defaults = registry.claim_defaults()
    assert defaults["sync"]["concurrency"] == {"arg": "account", "limit": 1, "default": None}
    assert defaults["sync"]["rate"] == {"arg": None, "limit": 10, "period": 1.0, "default": None}
    assert defaults["report"]["rate"] == {
        "arg": "region",
        "limit": 600,
        "period": 60.0,
        "default": "eu",
    }
    bad = [
        ({"rate_limit_key": "account"}, txqueue.ConfigError, "needs a rate_limit"),
        ({"concurrency_limit": 0}, txqueue.InvalidValueError, "concurrency_limit: must be"),
        ({"concurrency_limit": "1"}, txqueue.InvalidTypeError, "concurrency_limit: must be"),
        ({"rate_limit": "often"}, txqueue.InvalidValueError, "rate_limit: 'often' is not"),
        (
            {"rate_limit": "1/s", "rate_limit_key": "a b"},
            txqueue.InvalidValueError,
            "rate_limit_key",
        ),
    ]
    for options, error, message in bad:
        with pytest.raises(error, match=message):
            registry.task("bad", **options)
    with pytest.raises(txqueue.ConfigError, match="'user' is not an argument of its handler"):
        registry.task("other", concurrency_key="user", concurrency_limit=1)(sync.fn)
    with pytest.raises(txqueue.ConfigError, match="given the payload whole"):
        registry.task("whole", concurrency_key="payload", concurrency_limit=1)(_whole)
    registry.task("whole", concurrency_limit=1)(_whole)  # the task as a whole: no argument
    with pytest.raises(txqueue.ConfigError, match="a key is a str, int, float or bool"):
        registry.task("listed", concurrency_key="ids", concurrency_limit=1)(_listed)

    @registry.task(concurrency_key="account", concurrency_limit=2)
    def refund(account: int) -> None: ...

    with pytest.raises(txqueue.ConfigError, match="share the concurrency key 'account'"):
        registry.claim_defaults()


def test_a_tasks_concurrency_key_is_written_at_enqueue_and_a_key_alone_limits_nothing() -> None:
    registry = txqueue.Registry()

    @registry.task(concurrency_key="tenant")
    def build(tenant: str, month: int, region: str = "eu") -> None: ...

    @registry.task(concurrency_key="region")
    def publish(region: str = "eu") -> None: ...

    @registry.task(concurrency_limit=3)
    def export(month: int) -> None: ...

    @registry.task()
    def plain(month: int) -> None: ...

    assert build.task("acme", 3).concurrency_key == "tenant:acme"
    assert build.options(priority=5).task("acme", 3).concurrency_key == "tenant:acme"
    assert publish.task().concurrency_key == "region:eu"
    assert publish.task(region="us").concurrency_key == "region:us"
    assert export.task(1).concurrency_key == "task:export"
    assert plain.task(1).concurrency_key is None
    assert "concurrency" not in registry.claim_defaults()["build"]
    with pytest.raises(txqueue.InvalidValueError, match="concurrency_key: must be 1 to 500"):
        txqueue.Task("plain", {"month": 1}, concurrency_key="")

    @registry.task(concurrency_key="region", concurrency_limit=1)
    def sync(region: str) -> None: ...

    with pytest.raises(
        txqueue.ConfigError, match=r"share the concurrency key 'region' .* \(none and 1\)"
    ):
        registry.claim_defaults()

    @registry.task(concurrency_key="url")
    def fetch(url: str) -> None: ...

    with pytest.raises(txqueue.InvalidValueError, match="url: makes a concurrency key longer"):
        fetch.task("https://example.com/" + "x" * 500)


def _whole(payload: dict[str, int]) -> None: ...


def _listed(ids: tuple[int, ...] = (1, 2)) -> None: ...


def test_lease_policies_and_the_failure_hook() -> None:
    seen: list[txqueue.FailedTask] = []
    registry = txqueue.Registry(on_failed=seen.append)

    @registry.task(queue="billing", on_lease_expired="abandon")
    def charge(payload: dict) -> None: ...

    @registry.task(compensate="refund")
    def ship(payload: dict) -> None: ...

    defaults = registry.claim_defaults
    with pytest.raises(txqueue.ConfigError, match="'refund' is not a registered task"):
        defaults()

    @registry.task(queue="billing")
    def refund(payload: dict) -> None: ...

    assert defaults()["charge"]["on_lease_expired"] == {"policy": "abandon"}
    assert defaults()["ship"]["on_lease_expired"] == {
        "policy": "compensate",
        "name": "refund",
        "queue": "billing",
    }
    with pytest.raises(txqueue.InvalidValueError) as info:
        registry.task("x", on_lease_expired="ignore")
    assert info.value.field == "on_lease_expired"
    with pytest.raises(txqueue.InvalidValueError) as info:
        registry.task("y", compensate="")
    assert info.value.field == "compensate"

    failure = txqueue.FailedTask(uuid7(), "charge", "billing", {}, 1, "lease expired", None)
    registry.alert(failure)
    assert seen == [failure]

    @registry.on_failed
    def broken(failure: txqueue.FailedTask) -> None:
        raise RuntimeError("the pager is down")

    registry.alert(failure)  # logged, never raised


def test_message_round_trip_and_malformed_bodies() -> None:
    task_id = uuid7()
    assert wakeup.decode(wakeup.encode(task_id, "123")) == [wakeup.Wakeup(task_id, "123")]
    assert wakeup.decode(wakeup.encode(task_id, None))[0].xid is None
    ids = [uuid7() for _ in range(3)]
    assert wakeup.decode(wakeup.encode_many(ids, "7")) == [wakeup.Wakeup(i, "7") for i in ids]
    assert wakeup.encode_many(ids[:1], "7") == wakeup.encode(ids[0], "7")
    # Whether the message says its tasks were all due when enqueued (an older txqueue's,
    # and the cleaner's, do not say).
    assert wakeup.decode(wakeup.encode(task_id, "1"))[0].ripe is False
    assert b"ripe" not in wakeup.encode_many(ids, "1")
    assert [w.ripe for w in wakeup.decode(wakeup.encode_many(ids, "1", True))] == [True] * 3
    for body, reason in [
        (b"\xff\xfe", "not JSON"),
        (b"[]", "not an object"),
        (b'{"id": 1}', "not a UUID"),
        (b'{"ids": ["%s", 1]}' % str(task_id).encode(), "not a UUID"),
        (b'{"ids": []}', "not a list of 1 to 1000 ids"),
        (b'{"ids": "%s"}' % str(task_id).encode(), "not a list"),
        (b'{"id": "%s", "ids": []}' % str(task_id).encode(), "not an object"),
        (b'{"id": "%s", "xid": 12}' % str(task_id).encode(), "not a transaction id"),
        (b'{"id": "%s", "xid": "1; drop"}' % str(task_id).encode(), "not a transaction id"),
        (b'{"id": "%s", "ripe": 1}' % str(task_id).encode(), "not true or false"),
        (b'{"id": "%s", "ripe": "yes"}' % str(task_id).encode(), "not true or false"),
    ]:
        with pytest.raises(ValueError, match=reason):
            wakeup.decode(body)


def test_an_enqueues_wakeups_say_ripe_only_when_all_their_tasks_were_due() -> None:
    def sent(tasks: list[Task], new: list[bool]) -> dict[str, tuple[int, bool]]:
        rows = [Inserted(uuid7(), n, "7") for n in new]
        out = {}
        for queue, body in client.wakeups_for(tasks, rows):
            decoded = wakeup.decode(body)
            out[queue] = (len(decoded), decoded[0].ripe)
        return out

    past = datetime.now(UTC) - timedelta(seconds=5)
    due_now = [Task("t", queue="a"), Task("t", queue="a", run_at=past), Task("t", queue="b")]
    assert sent(due_now, [True, True, True]) == {"a": (2, True), "b": (1, True)}
    # One task due later makes its queue's message not ripe, and no other's; a row the
    # call did not create (a unique key held) is not woken, nor weighed.
    later = [*due_now, Task("t", queue="a", delay=30), Task("t", queue="b", delay=30)]
    assert sent(later, [True, True, True, True, False]) == {"a": (3, False), "b": (1, True)}
    # The cleaner's and the worker's own wake-ups do not say.
    body = client.wakeups_of([("a", Inserted(uuid7(), True, "7"))])[0][1]
    assert wakeup.decode(body)[0].ripe is False


@pytest.mark.parametrize("filename", ["schema.sql", "schema.sqlite.sql"])
def test_schema_splits_into_increasing_migrations(filename: str) -> None:
    preamble, numbered = migrations(schema_text(filename))
    assert "txqueue_migrations" in preamble
    assert [v for v, _ in numbered] == list(range(1, len(numbered) + 1))
    assert "CREATE TABLE IF NOT EXISTS txqueue_tasks" in numbered[0][1]


def test_a_sqlalchemy_connection_on_another_driver_is_refused() -> None:
    class Connection:  # what bind() sees of SQLAlchemy: its module and driver connection
        __module__ = "sqlalchemy.engine.base"
        connection = type("Pool", (), {"driver_connection": object()})()

        def in_transaction(self) -> bool:
            return True

    with pytest.raises(txqueue.ConfigError, match="this one runs on builtins"):
        txqueue.enqueue(Connection(), txqueue.Task("rec"))


def test_the_core_imports_no_optional_driver_or_framework() -> None:
    """Each driver and framework is an extra, imported only when its connection or its
    integration is used."""
    code = (
        "import sys, txqueue, txqueue.cli; "
        "print(sorted(m for m in ('psycopg2', 'asyncpg', 'aiosqlite', 'sqlalchemy', 'django', "
        "'fastapi')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_payload_or_result_over_the_size_limit_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limit = config.DEFAULT_MAX_JSON
    with pytest.raises(txqueue.InvalidValueError, match=r"payload: is 1,048,577 bytes of JSON, "):
        Task("t", {"blob": "x" * (limit - 10)})  # {"blob":"…"}: 11 bytes besides
    Task("t", {"blob": "x" * (limit - 11)})  # the limit itself is allowed
    big = "x" * limit

    registry = txqueue.Registry()

    @registry.task()
    def store(name: str, blob: str) -> None: ...

    with pytest.raises(txqueue.InvalidValueError) as raised:
        store.task(name="x", blob=big)
    assert raised.value.field == "blob"  # the argument at fault, not the whole payload

    monkeypatch.setenv(config.MAX_JSON_ENV, "2048")
    config.max_json_bytes.cache_clear()
    try:
        with pytest.raises(txqueue.InvalidValueError, match=r"over the limit of 2,048 \("):
            Task("t", {"blob": "x" * 2048})
        monkeypatch.setenv(config.MAX_JSON_ENV, "lots")
        config.max_json_bytes.cache_clear()
        with pytest.raises(txqueue.ConfigError, match="TXQUEUE_MAX_JSON_BYTES must be"):
            Task("t", {})
    finally:
        monkeypatch.delenv(config.MAX_JSON_ENV)
        config.max_json_bytes.cache_clear()


def test_a_running_tasks_claim_is_read_once_from_its_entry_and_its_row_on_sqlite() -> None:
    # SQLite's JSON renders a time to 15 significant digits, its column reads to the us:
    # the entry's `started` and the row's start_time of one claim differ by up to 10 us.
    # 200 start times a third of a us apart (every rounding of each side): each reads as
    # one claimed line and the cancel.
    base = 1796003680.0132
    for step in range(200):
        raw = base + step * 1e-6 / 3
        entry = {"at": raw + 0.5, "attempt": 1, "move": "cancel", "to": "running", "by": None}
        entry |= {"started": float(f"{raw:.15g}"), "worker": "w"}
        row_started = datetime.fromtimestamp(round(raw, 6), UTC)
        moves = [e.move for e in timeline([entry], "running", 1, row_started, "w")]
        assert moves == ["claimed", "cancel"], raw
