"""The task the flow-control tests run in worker processes: it records when it started
and ended, so that the test can check every limit against what really ran."""

from __future__ import annotations

import os
import threading
import time

import txqueue

registry = txqueue.Registry()
keyed = txqueue.Registry()
"""Tasks with limits of their own: a worker of this registry claims with the keyed
statements, one of ``registry`` with the lean ones."""
_lock = threading.Lock()


@registry.task(queue=os.environ.get("TXQUEUE_TEST_QUEUE", "flow"), context=True)
def span(ctx: txqueue.TaskContext, key: str = "", seconds: float = 0.0) -> None:
    """Sleep ``seconds``; append ``id key start end pid`` to this process's file."""
    start = time.time()
    time.sleep(seconds)
    end = time.time()
    path = os.path.join(os.environ["TXQUEUE_TEST_RECORD_DIR"], f"{os.getpid()}.log")
    with _lock, open(path, "a") as f:
        f.write(f"{ctx.id} {key or '-'} {start:.6f} {end:.6f} {os.getpid()}\n")


@keyed.task(
    queue=os.environ.get("TXQUEUE_TEST_QUEUE", "flow"),
    context=True,
    concurrency_key="key",
    concurrency_limit=1,
)
def one_per_key(ctx: txqueue.TaskContext, key: str, seconds: float = 0.0) -> None:
    """``span``, at most one at a time per ``key`` across every worker."""
    span(ctx, key, seconds)


@keyed.task(
    queue=os.environ.get("TXQUEUE_TEST_QUEUE", "flow"),
    context=True,
    rate_limit="10/s",
    rate_limit_key="key",
)
def ten_a_second(ctx: txqueue.TaskContext, key: str, seconds: float = 0.0) -> None:
    """``span``, started at most ten times a second per ``key`` across every worker."""
    span(ctx, key, seconds)


fair = txqueue.Registry()
"""A task keyed on its tenant, with no limit: in a fair-share queue, tenants take turns."""


@fair.task(queue=os.environ.get("TXQUEUE_TEST_QUEUE", "flow"), context=True, concurrency_key="key")
def per_tenant(ctx: txqueue.TaskContext, key: str, seconds: float = 0.0) -> None:
    """``span``, keyed on the tenant ``key``."""
    span(ctx, key, seconds)
