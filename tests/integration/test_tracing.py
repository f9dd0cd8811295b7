"""OpenTelemetry: a task's first attempt continues the trace it was enqueued in, and each
retry starts its own, linked to the enqueue; recorded by the SDK's in-memory exporter from
a real worker."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once

import txqueue
from txqueue import Task
from txqueue.observability import tracing

from .helpers import connect, execute, rows, running, wait_until

pytestmark = pytest.mark.xdist_group("test_tracing")

_exporter = InMemorySpanExporter()


class Exploding(SpanProcessor):
    """An application's span processor that fails, when told to."""

    on = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.on:
            raise RuntimeError("the processor fails")


_exploding = Exploding()


@pytest.fixture(scope="module")
def provider() -> Iterator[TracerProvider]:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(_exporter))
    tracer_provider.add_span_processor(_exploding)
    trace.set_tracer_provider(tracer_provider)
    yield tracer_provider
    tracer_provider.shutdown()
    # The API lets a process set its provider once; the later modules must run untraced,
    # as an application without one does, so the globals go back to unset (as the
    # OpenTelemetry project's own test utilities do).
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    tracing._tracer = None


@pytest.fixture
def spans(provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    _exporter.clear()
    yield _exporter
    _exporter.clear()


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name == name]


def test_the_first_attempt_continues_the_enqueuers_trace_and_a_retry_starts_its_own(
    db_url: str, amqp_url: str, queue: str, spans: InMemorySpanExporter
) -> None:
    registry = txqueue.Registry()
    seen: list[tuple[int, int, int]] = []  # trace id, span id, attempt
    lock = threading.Lock()

    @registry.task("flaky", queue=queue, max_attempts=2, backoff=0.05)
    def flaky(payload: Any, ctx: txqueue.TaskContext) -> None:
        current = trace.get_current_span().get_span_context()
        with lock:
            seen.append((current.trace_id, current.span_id, ctx.attempt))
        with trace.get_tracer("app").start_as_current_span("inside the handler"):
            if ctx.attempt == 1:
                raise RuntimeError("the first attempt fails")

    tracer = trace.get_tracer("app")
    with (
        tracer.start_as_current_span("request") as request,
        closing(connect(db_url)) as c,
        txqueue.transaction(c),
    ):
        task_id = txqueue.enqueue(c, Task("flaky", {"n": 1}, queue=queue))
    [row] = rows(db_url)
    stored = row["trace_context"]
    carrier = stored if isinstance(stored, dict) else json.loads(stored)
    trace_id = request.get_span_context().trace_id
    assert carrier["traceparent"].split("-")[1] == f"{trace_id:032x}"

    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=amqp_url, poll_interval=0.05)
    with running(worker):
        wait_until(lambda: len(named(spans, f"process {queue}")) == 2, timeout=10)

    [send] = named(spans, f"send {queue}")
    assert send.kind is SpanKind.PRODUCER and send.context is not None
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert send.attributes is not None
    assert send.attributes["messaging.system"] == "txqueue"
    assert send.attributes["messaging.destination.name"] == queue

    first, second = sorted(
        named(spans, f"process {queue}"),
        key=lambda s: s.attributes["txqueue.task.attempt"] if s.attributes else 0,
    )
    assert first.context is not None and second.context is not None
    # The first attempt, in the request's trace, is a child of the enqueue; the retry is
    # the root of a trace of its own. Both link to the enqueue.
    assert first.context.trace_id == trace_id
    assert first.parent is not None and first.parent.span_id == send.context.span_id
    assert second.context.trace_id != trace_id and second.parent is None
    for span in (first, second):
        [link] = span.links
        assert (link.context.trace_id, link.context.span_id) == (trace_id, send.context.span_id)
    for span, attempt in ((first, 1), (second, 2)):
        assert span.kind is SpanKind.CONSUMER
        assert span.attributes == {
            "messaging.system": "txqueue",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": queue,
            "messaging.message.id": str(task_id),
            "txqueue.task.name": "flaky",
            "txqueue.task.attempt": attempt,
            "txqueue.task.outcome": "retried" if attempt == 1 else "succeeded",
        } | ({"error.type": "builtins.RuntimeError"} if attempt == 1 else {})
    # The handler ran inside its attempt's span: its own spans are children of it.
    assert sorted(a for _, _, a in seen) == [1, 2]
    for trace_of, span_of, attempt in seen:
        span = first if attempt == 1 else second
        assert span.context is not None
        assert (trace_of, span_of) == (span.context.trace_id, span.context.span_id)
    inside = named(spans, "inside the handler")
    assert {s.parent.span_id for s in inside if s.parent} == {
        s.context.span_id for s in (first, second) if s.context
    }

    assert first.status.status_code is StatusCode.ERROR
    [event] = first.events
    assert event.name == "exception" and event.attributes is not None
    assert event.attributes["exception.type"] == "builtins.RuntimeError"
    assert "Traceback" in str(event.attributes["exception.stacktrace"])
    assert event.attributes["exception.message"] == "the first attempt fails"
    assert second.status.status_code is not StatusCode.ERROR and not second.events


def test_workflow_steps_run_in_the_workflows_trace_and_a_retry_passes_on_its_own(
    db_url: str, amqp_url: str, queue: str, spans: InMemorySpanExporter
) -> None:
    registry = txqueue.Registry()
    registry.task("first", queue=queue)(lambda payload: None)
    registry.task("next", queue=queue)(lambda payload: None)

    @registry.task("second", queue=queue, max_attempts=2, backoff=0.05)
    def second(payload: Any, ctx: txqueue.TaskContext) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("the first attempt fails")
        with closing(connect(db_url)) as c, txqueue.transaction(c):
            txqueue.enqueue(c, Task("next", queue=queue))  # a chain, from the retry

    flow = txqueue.Workflow("traced")
    flow.add(Task("second", queue=queue), after=[flow.add(Task("first", queue=queue))])
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        txqueue.enqueue_workflow(c, flow)
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=amqp_url, poll_interval=0.05)
    with running(worker):
        wait_until(lambda: len(named(spans, f"process {queue}")) == 4, timeout=10)

    # One send for the workflow (its two steps), and one from the retry of its second step.
    by_parent = {s.parent is None: s for s in named(spans, f"send {queue}")}
    flow_send, chain_send = by_parent[True], by_parent[False]
    assert flow_send.attributes is not None
    assert flow_send.attributes["messaging.batch.message_count"] == 2
    attempts = {
        (s.attributes["txqueue.task.name"], s.attributes["txqueue.task.attempt"]): s
        for s in named(spans, f"process {queue}")
        if s.attributes
    }
    assert sorted(attempts) == [("first", 1), ("next", 1), ("second", 1), ("second", 2)]
    sent = flow_send.context
    assert sent is not None
    # A step that runs after its parent is still its task's first attempt: the workflow's.
    for key in (("first", 1), ("second", 1)):
        span = attempts[key]
        assert span.parent is not None and span.context is not None
        assert (span.context.trace_id, span.parent.span_id) == (sent.trace_id, sent.span_id)
    retry = attempts[("second", 2)]
    assert retry.context is not None and retry.context.trace_id != sent.trace_id
    assert retry.parent is None
    assert [(k.context.trace_id, k.context.span_id) for k in retry.links] == [
        (sent.trace_id, sent.span_id)
    ]
    # What the retry enqueued runs in the retry's trace: a chain follows the attempt it came from.
    chained = attempts[("next", 1)]
    assert chain_send.parent is not None and chain_send.parent.span_id == retry.context.span_id
    assert chained.context is not None and chained.context.trace_id == retry.context.trace_id


def test_the_baggage_enqueued_with_a_task_is_current_in_each_attempt(
    db_url: str, queue: str, spans: InMemorySpanExporter
) -> None:
    registry = txqueue.Registry()
    seen: list[tuple[int, object]] = []

    @registry.task("flaky", queue=queue, max_attempts=2, backoff=0)
    def flaky(payload: Any, ctx: txqueue.TaskContext) -> None:
        seen.append((ctx.attempt, baggage.get_baggage("tenant")))
        if ctx.attempt == 1:
            raise RuntimeError("the first attempt fails")

    token = otel_context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        with closing(connect(db_url)) as c, txqueue.transaction(c):
            txqueue.enqueue(c, Task("flaky", queue=queue))
    finally:
        otel_context.detach(token)
    txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
    assert seen == [(1, "acme"), (2, "acme")]


def test_async_handlers_and_their_logs_run_inside_the_attempt(
    db_url: str, queue: str, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    registry = txqueue.Registry()
    seen: list[int] = []

    @registry.task("coro", queue=queue)
    async def coro(payload: Any) -> None:
        await asyncio.sleep(0)
        seen.append(trace.get_current_span().get_span_context().span_id)
        logging.getLogger("app").info("from the coroutine")

    caplog.set_level(logging.INFO, logger="app")
    filter_ = txqueue.TaskLogFilter()
    caplog.handler.addFilter(filter_)
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        # Two tasks in one call share their producer span.
        ids = txqueue.enqueue_many(c, [Task("coro", i, queue=queue) for i in range(2)])
    txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)

    [send] = named(spans, f"send {queue}")
    assert send.attributes is not None and send.attributes["messaging.batch.message_count"] == 2
    processed = named(spans, f"process {queue}")
    assert {s.attributes["messaging.message.id"] for s in processed if s.attributes} == {
        str(i) for i in ids
    }
    assert send.context is not None
    assert {s.parent.span_id for s in processed if s.parent} == {send.context.span_id}
    assert sorted(seen) == sorted(s.context.span_id for s in processed if s.context)
    records = [r for r in caplog.records if r.getMessage() == "from the coroutine"]
    assert sorted(r.task_id for r in records) == sorted(str(i) for i in ids)  # type: ignore[attr-defined]
    assert {(r.task_name, r.queue, r.attempt) for r in records} == {("coro", queue, 1)}  # type: ignore[attr-defined]


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str() for this one")


def test_an_exception_that_cannot_be_printed_is_recorded_as_the_task_records_it(
    db_url: str, queue: str, spans: InMemorySpanExporter
) -> None:
    registry = txqueue.Registry()

    @registry.task("hostile", queue=queue, max_attempts=1)
    def hostile(payload: Any) -> None:
        raise Unprintable

    with closing(connect(db_url)) as c, txqueue.transaction(c):
        txqueue.enqueue(c, Task("hostile", queue=queue))
    txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
    [row] = rows(db_url)
    [error] = row["errors"] if isinstance(row["errors"], list) else json.loads(row["errors"])
    assert (row["state"], error["message"]) == ("failed", "<str() of the Unprintable failed>")
    [span] = named(spans, f"process {queue}")
    assert span.attributes is not None and span.attributes["txqueue.task.outcome"] == "failed"
    [event] = span.events
    assert event.attributes is not None
    assert event.attributes["exception.message"] == error["message"]
    assert str(event.attributes["exception.type"]).endswith("test_tracing.Unprintable")


def test_tracing_that_fails_fails_no_enqueue_and_no_task(
    db_url: str, queue: str, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    registry, runs = txqueue.Registry(), []
    registry.task("noop", queue=queue)(runs.append)
    _exploding.on = True
    try:
        with closing(connect(db_url)) as c, txqueue.transaction(c):
            txqueue.enqueue(c, Task("noop", 1, queue=queue))
        txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
    finally:
        _exploding.on = False
    [row] = rows(db_url)
    assert (row["state"], row["attempts"], runs) == ("succeeded", 1, [1])
    failures = [r.getMessage() for r in caplog.records if r.name == "txqueue.tracing"]
    assert failures == ["tracing: could not end a span; going on without"] * 2


def test_tables_older_than_the_code_ask_for_txqueue_init(db_url: str, queue: str) -> None:
    execute(db_url, "ALTER TABLE txqueue_tasks DROP COLUMN trace_context")
    with closing(connect(db_url)) as c, pytest.raises(txqueue.StoreError) as raised:
        txqueue.enqueue(c, Task("noop", queue=queue))
    assert str(raised.value) == (
        "enqueue: the txqueue tables are older than this txqueue; run `txqueue init`"
    )
