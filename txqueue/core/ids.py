"""The ids txqueue makes for tasks and workflows (``uuid7``), and the lock that keeps them
increasing within a process."""

from __future__ import annotations

import os
import threading
import time
import uuid

_last_id = 0
_id_lock = threading.Lock()


def uuid7() -> uuid.UUID:
    """A time-ordered UUID (RFC 9562 version 7): new rows land at the right edge of the index.

    Within one process the ids only increase, also inside one millisecond (the random
    bits then count up), so "newest first" by id is the order of enqueueing.
    """
    global _last_id
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & (2**48 - 1)) << 80 | 0x7 << 76 | (rand >> 68 & 0xFFF) << 64
    value |= 0b10 << 62 | rand & (2**62 - 1)
    with _id_lock:
        if value <= _last_id:
            value = _last_id + 1
        _last_id = value
    return uuid.UUID(int=value)
