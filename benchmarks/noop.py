"""The benchmark's task module: a handler that does nothing, one that notes when it
started (its result), for commit-to-start latency, one that notes when its signal resumed
it, one that notes when its child's end did, and one that sleeps, for ``wait``."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import txqueue

registry = txqueue.Registry()

if os.environ.get("TXQUEUE_BENCH_TRACING"):
    # Every span made, batched and handed to an exporter, as in production, minus the
    # network: the exporter drops them.
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)


@registry.task("noop", queue="bench")
def noop(payload: Any) -> None:
    return None


@registry.task("stamp", queue="bench")
def stamp(payload: Any) -> float:
    return time.time()


@registry.task("signalled", queue="bench", context=True)
def signalled(ctx: txqueue.TaskContext, key: str) -> float:
    """Parks until its signal comes: the time it resumed."""
    ctx.wait_for(key)
    return time.time()


@registry.task("parent", queue="bench", context=True)
def parent(ctx: txqueue.TaskContext) -> float:
    """Runs ``stamp`` as its child, parked until it ends: the time it resumed."""
    ctx.run_child(txqueue.Task("stamp", queue=ctx.queue))
    return time.time()


@registry.task("nap", queue="bench")
def nap(payload: Any) -> None:
    time.sleep(payload["seconds"])


def keyed_noop(key: int) -> None:
    """``noop`` with an argument to key on, for what keys cost."""
    return None


keyed = txqueue.Registry()
"""The workers of the keyed drain: a registry whose task has limits of its own makes every
claim of the worker count its keys, so it is kept apart from the others'; ``unkeyed``
runs the same task without them, the drain it is measured against."""
keyed.task("keyed_noop", queue="bench", concurrency_key="key", concurrency_limit=10)(keyed_noop)
unkeyed = txqueue.Registry()
unkeyed.task("keyed_noop", queue="bench")(keyed_noop)


@registry.task("hop", queue="bench")
def hop(after: float) -> float:
    """A chain's step, given its parent's start: the time it started."""
    return time.time()


@registry.task("part", queue="bench")
def part(i: int) -> int:
    return i


@registry.task("join", queue="bench")
def join(parts: list[int]) -> float:
    """A fan-in of ``part`` steps: the time it started."""
    return time.time()
