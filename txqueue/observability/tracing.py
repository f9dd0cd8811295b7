"""OpenTelemetry tracing (``txqueue[otel]``): a producer span around each enqueue, whose
context is stored with its tasks, and a consumer span around each attempt that links to
it. Without opentelemetry-api installed, or with no tracer provider set up (an SDK's),
each function here does nothing and costs a call.

The spans follow OpenTelemetry's messaging conventions, with ``txqueue`` as the system:
``send <queue>`` at enqueue, ``process <queue>`` per attempt. A task's first attempt is
also a child of its enqueue, in the enqueuer's trace; each retry starts a trace of its own.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from ..core.task import Task
from ..store.records import Claimed

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
except ImportError:  # tracing off: txqueue[otel] is not installed
    trace = None  # type: ignore[assignment]

log = logging.getLogger("txqueue.tracing")
SYSTEM = "txqueue"
_OFF: nullcontext[None] = nullcontext()
_tracer: Any = None


def _on() -> bool:
    """Whether spans would be recorded: an SDK (or another provider) has been set up. Asked
    each time, as the application may set one up after importing txqueue. Without one,
    the API's no-op spans would still cost a task several µs."""
    global _tracer
    if trace is None or isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
    ):
        return False
    if _tracer is None:
        # A ProxyTracer from get_tracer would do too; the provider's own is faster per span.
        _tracer = trace.get_tracer("txqueue")
    return True


def sending(tasks: Sequence[Task]) -> AbstractContextManager[str | None]:
    """A producer span around writing ``tasks``; yields the trace context to store with
    them (JSON text), or None when tracing is off."""
    return _sending(tasks) if _on() else _OFF


@contextmanager
def _sending(tasks: Sequence[Task]) -> Iterator[str | None]:
    queues = {t.queue for t in tasks}
    destination = next(iter(queues)) if len(queues) == 1 else "(several)"
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": destination,
    }
    if len(tasks) != 1:
        attributes["messaging.batch.message_count"] = len(tasks)
    with _span(f"send {destination}", trace.SpanKind.PRODUCER, attributes) as span:
        stored = None
        if span is not None:
            try:
                carrier: dict[str, str] = {}
                propagate.inject(carrier)
                stored = json.dumps(carrier, separators=(",", ":")) if carrier else None
            except Exception:
                _failed("store a trace context")
        yield stored


@contextmanager
def _span(
    name: str, kind: Any, attributes: dict[str, Any], parent: Any = None, links: Any = None
) -> Iterator[Any | None]:
    """A span, current in the block, in ``parent`` (a context) if given, whose baggage is
    current too; None if the span could not be started."""
    try:
        span = _tracer.start_span(
            name, context=parent, kind=kind, attributes=attributes, links=links
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
    except Exception:
        _failed("start a span")
        yield None
        return
    try:
        yield span
    finally:
        _close(span, token)


def _failed(what: str) -> None:
    # Tracing is never a reason to fail an enqueue or an attempt: the task goes on untraced.
    log.warning("tracing: could not %s; going on without", what, exc_info=True)


def _close(span: Any, token: Any) -> None:
    try:
        otel_context.detach(token)
        span.end()  # runs the span processors, the application's own too
    except Exception:
        _failed("end a span")


class Attempt:
    """The span of one attempt, current on the handler's thread while it runs."""

    def __init__(self, span: Any) -> None:
        self._span = span

    def failed(self, outcome: str, error: dict[str, Any] | None) -> None:
        """The attempt failed, as described by ``error`` (an entry of the task's error
        history, whose text a hostile exception's ``__str__`` could not spoil)."""
        if self._span is None:
            return
        error = error or {}
        event = {
            "exception.type": str(error.get("type") or ""),
            "exception.message": str(error.get("message") or ""),
            "exception.stacktrace": str(error.get("traceback") or ""),
        }
        try:
            # The messaging conventions require error.type on an operation that failed.
            type_ = event["exception.type"] or "_OTHER"
            self._span.set_attributes({"txqueue.task.outcome": outcome, "error.type": type_})
            self._span.set_status(trace.StatusCode.ERROR, event["exception.message"][:200])
            self._span.add_event("exception", event)
        except Exception:
            _failed("record a failure")

    def ended(self, outcome: str) -> None:
        if self._span is not None:
            try:
                self._span.set_attribute("txqueue.task.outcome", outcome)
            except Exception:
                _failed("record an outcome")


_NO_ATTEMPT = Attempt(None)


def processing(task: Claimed) -> AbstractContextManager[Attempt]:
    """A consumer span for one attempt at ``task``, linked to the span that enqueued it (a
    child of it too on the first attempt), current while the block runs."""
    return _processing(task) if _on() else nullcontext(_NO_ATTEMPT)


@contextmanager
def _processing(task: Claimed) -> Iterator[Attempt]:
    parent, links = _origin(task)
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": task.queue,
        "messaging.message.id": str(task.id),
        "txqueue.task.name": task.name,
        "txqueue.task.attempt": task.attempts,
    }
    kind = trace.SpanKind.CONSUMER
    with _span(f"process {task.queue}", kind, attributes, parent, links) as span:
        yield _NO_ATTEMPT if span is None else Attempt(span)


def _origin(task: Claimed) -> tuple[Any, list[Any]]:
    """The context to start ``task``'s attempt span in, and its links. Every attempt links
    to the span that enqueued the task (its creation context, in the conventions' words).
    The first attempt is its child as well; a retry is the root of a new trace, since one
    trace would otherwise stretch across the backoff (hours, perhaps): a backend would show
    the trace of the request that enqueued the task lasting until its last attempt."""
    if not task.trace_context:
        return None, []
    try:
        stored = propagate.extract(json.loads(task.trace_context))
    except Exception:
        return None, []  # not a reason to fail a task: its span starts a new trace
    creation = trace.get_current_span(stored).get_span_context()
    if not creation.is_valid:
        return stored, []
    if task.attempts > 1:
        # Without its span the context starts a new trace; its baggage goes on.
        stored = trace.set_span_in_context(trace.INVALID_SPAN, stored)
    return stored, [trace.Link(creation)]
