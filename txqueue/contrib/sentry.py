"""Sentry for txqueue's workers (``pip install 'txqueue[sentry]'``):

    sentry_sdk.init(dsn=..., integrations=[TxQueueIntegration()])

Each failed attempt is reported once, with the handler's traceback and the task's name,
id, attempt, queue and worker as tags; the worker's own log line for that failure is left
out of Sentry (the logging integration would report a final failure a second time). With
tracing on (``traces_sample_rate``), each attempt is a transaction, ``queue.process``,
named after its task. In a process pool the handlers run in child processes: call
``sentry_sdk.init`` in the module that defines the registry, which each child imports.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from ..errors import ConfigError
from ..observability import reporting
from ..store.records import Claimed

try:
    import sentry_sdk
    from sentry_sdk.integrations import Integration
    from sentry_sdk.scope import add_global_event_processor
except ImportError:  # the extra is not installed
    raise ConfigError(
        "txqueue.contrib.sentry needs sentry-sdk: pip install 'txqueue[sentry]'"
    ) from None


class TxQueueIntegration(Integration):
    """Reports txqueue's failed attempts to Sentry, and traces each attempt."""

    identifier = "txqueue"

    @staticmethod
    def setup_once() -> None:
        reporting.add(_SENTRY)
        add_global_event_processor(_drop_reported_logs)


def _on() -> bool:
    return sentry_sdk.get_client().get_integration(TxQueueIntegration) is not None


def _tags(task: Claimed, worker_id: str) -> dict[str, str]:
    return {
        "txqueue.task": task.name,
        "txqueue.task_id": str(task.id),
        "txqueue.attempt": str(task.attempts),
        "txqueue.queue": task.queue,
        "txqueue.worker": worker_id,
    }


class _Sentry:
    def attempt(self, task: Claimed, worker_id: str) -> AbstractContextManager[object]:
        return _attempt(task, worker_id)

    def failed(self, task: Claimed, worker_id: str, error: BaseException) -> None:
        if _on():
            sentry_sdk.capture_exception(error)

    def flush(self) -> None:
        if _on():
            sentry_sdk.flush(timeout=2.0)


@contextmanager
def _attempt(task: Claimed, worker_id: str) -> Iterator[None]:
    if not _on():
        yield
        return
    # A scope of its own: what one task sets never shows in the next one's events.
    with sentry_sdk.isolation_scope() as scope:
        for key, value in _tags(task, worker_id).items():
            scope.set_tag(key, value)
        scope.set_context("txqueue", {"max_attempts": task.max_attempts, "step": task.step})
        with sentry_sdk.start_transaction(
            op="queue.process", name=task.name, source="task"
        ) as transaction:
            transaction.set_data("messaging.destination.name", task.queue)
            transaction.set_data("messaging.message.id", str(task.id))
            yield


def _drop_reported_logs(event: Any, hint: Any) -> Any:
    record = (hint or {}).get("log_record")
    if record is not None and getattr(record, reporting.REPORTED, False) and _on():
        return None
    return event


_SENTRY = _Sentry()
