"""txqueue[sentry]: a real worker's failed attempts reach Sentry once each, with the
handler's traceback and the task's tags, and each attempt is a transaction; sentry-sdk
sends through a transport of the test's own, so nothing leaves the machine."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

import txqueue
from txqueue.contrib.sentry import TxQueueIntegration

from .helpers import connect, running, wait_until


class Kept(Transport):
    """Keeps what the SDK would send."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[Any] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        self.items.extend(envelope.items)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [i.payload.json for i in self.items if i.type == kind]


@pytest.fixture
def sentry() -> Iterator[Kept]:
    kept = Kept()
    sentry_sdk.init(
        dsn="http://public@sentry.localhost/1",
        transport=kept,
        integrations=[TxQueueIntegration()],
        traces_sample_rate=1.0,
    )
    try:
        yield kept
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.get_global_scope().set_client(None)


def test_each_failed_attempt_is_reported_once_with_its_traceback_and_tags(
    sentry: Kept, db_url: str, queue: str
) -> None:
    registry = txqueue.Registry()

    @registry.task("charge", queue=queue, max_attempts=2, backoff=lambda attempt: 0.1)
    def charge(customer: int) -> None:
        raise RuntimeError(f"card declined for {customer}")

    @registry.task("ok", queue=queue)
    def ok() -> None:
        return None

    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=None, concurrency=2)
    with running(worker), closing(connect(db_url)) as c:
        with txqueue.transaction(c):
            task_id = charge.enqueue(c, 7)
            ok.enqueue(c)
        wait_until(lambda: txqueue.get_task(c, task_id).state == "failed", timeout=30)
        c.commit()
    sentry_sdk.flush(5)
    wait_until(lambda: len(sentry.of("transaction")) >= 3, timeout=10)

    errors = sentry.of("event")
    assert len(errors) == 2, [e.get("logentry") or e.get("exception") for e in errors]
    for attempt, event in enumerate(errors, start=1):
        (exception,) = event["exception"]["values"]
        assert (exception["type"], exception["value"]) == ("RuntimeError", "card declined for 7")
        assert "charge" in [f["function"] for f in exception["stacktrace"]["frames"]]
        assert event["tags"]["txqueue.task"] == "charge"
        assert event["tags"]["txqueue.task_id"] == str(task_id)
        assert event["tags"]["txqueue.attempt"] == str(attempt)
        assert event["tags"]["txqueue.queue"] == queue
        assert event["tags"]["txqueue.worker"] == worker.worker_id
    transactions = sentry.of("transaction")
    assert sorted(t["transaction"] for t in transactions) == ["charge", "charge", "ok"]
    assert {t["contexts"]["trace"]["op"] for t in transactions} == {"queue.process"}
    assert "txqueue.task" not in (transactions[-1].get("tags") or {}) or all(
        t["tags"]["txqueue.task"] == t["transaction"] for t in transactions
    )


def test_without_the_extra_it_fails_in_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "sentry_sdk", None)
    monkeypatch.delitem(sys.modules, "txqueue.contrib.sentry", raising=False)
    with pytest.raises(txqueue.ConfigError, match=r"pip install 'txqueue\[sentry\]'"):
        importlib.import_module("txqueue.contrib.sentry")


def test_the_how_to_sets_it_up_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    snippets = Path(__file__).resolve().parents[2] / "docs" / "snippets"
    monkeypatch.syspath_prepend(str(snippets))
    monkeypatch.setenv("SENTRY_DSN", "http://public@127.0.0.1:9/1")  # nothing is sent
    monkeypatch.delitem(sys.modules, "sentry_setup", raising=False)
    try:
        importlib.import_module("sentry_setup")
        client = sentry_sdk.get_client()
        assert client.get_integration(TxQueueIntegration) is not None
        assert client.options["traces_sample_rate"] == 0.1
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.get_global_scope().set_client(None)
