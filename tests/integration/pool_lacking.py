"""A registry whose module registers one task, and to which a test adds another at run
time: a process pool's children, importing the module, lack it (test_pool.py)."""

from __future__ import annotations

import txqueue

registry = txqueue.Registry()


@registry.task("here")
def here() -> None: ...
