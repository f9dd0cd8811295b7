"""Error trackers told of every attempt: around its run, and of its failure with the
exception the handler raised. ``txqueue.contrib.sentry`` adds one; with none added each
call here costs a check of an empty list."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from typing import Protocol

from ..store.records import Claimed

log = logging.getLogger("txqueue.reporting")

REPORTED = "txqueue_failure_reported"
"""Set on the log record of an attempt's failure (``extra``), which a tracker that was told
of the failure itself may leave out, so as to report it once."""


class Reporter(Protocol):
    def attempt(self, task: Claimed, worker_id: str) -> AbstractContextManager[object]: ...
    def failed(self, task: Claimed, worker_id: str, error: BaseException) -> None: ...
    def flush(self) -> None: ...


_reporters: list[Reporter] = []


def add(reporter: Reporter) -> None:
    if reporter not in _reporters:
        _reporters.append(reporter)


def attempt(task: Claimed, worker_id: str) -> AbstractContextManager[object]:
    """Around one attempt, on the thread that runs its handler."""
    return _attempt(task, worker_id) if _reporters else nullcontext()


@contextmanager
def _attempt(task: Claimed, worker_id: str) -> Iterator[None]:
    with ExitStack() as stack:
        for reporter in list(_reporters):
            try:
                stack.enter_context(reporter.attempt(task, worker_id))
            except Exception:
                log.exception("an error tracker failed to start watching an attempt")
        yield


def failed(task: Claimed, worker_id: str, error: BaseException) -> None:
    """The attempt failed with ``error``, in the block of ``attempt``."""
    for reporter in list(_reporters):
        try:
            reporter.failed(task, worker_id, error)
        except Exception:
            log.exception("an error tracker failed to report task %s", task.id)


def flush() -> None:
    """Send what the trackers hold, before a process that ran handlers exits (a process
    pool's child leaves with ``os._exit``, which runs no exit hook)."""
    for reporter in list(_reporters):
        try:
            reporter.flush()
        except Exception:
            log.exception("an error tracker failed to send what it held")
