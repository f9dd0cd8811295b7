"""The benchmark's task module: a handler that does nothing."""

from __future__ import annotations

from typing import Any

import txqueue

registry = txqueue.Registry()


@registry.task("noop", queue="bench")
def noop(payload: Any) -> None:
    return None
