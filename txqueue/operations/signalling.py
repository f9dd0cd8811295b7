"""Signals to the handlers that wait for them (``ctx.wait_for``): ``txqueue.signal`` and
``signal_async``, in the caller's transaction, as ``enqueue`` is."""

from __future__ import annotations

from typing import Any

from ..core.fields import check_signal_key, encode_json
from ..outbox.client import Delivery, waking
from ..store.bound import AsyncBound, Bound
from ..store.connections import bind, bind_async
from ..store.plans import Plan, call, run, run_async
from ..store.protocols import AnyStore, Manage
from ..store.records import Moved
from .one import wakeups


class Signalling:
    """``signal`` and its asyncio form, through ``_store`` and ``_delivery`` (None: the
    process's defaults)."""

    _store: AnyStore | None = None
    _delivery: Delivery | None = None

    def signal(self, conn: object, key: str, payload: Any = None) -> int:
        """Send signal ``key`` in the caller's transaction on ``conn`` (any connection
        ``enqueue`` takes): the handlers parked in ``ctx.wait_for(key)`` run again and get
        ``payload`` (JSON), once the transaction commits; a rollback sends nothing. With no
        wait parked on the key, the signal is kept for the next one (one signal, one wait,
        first sent, first taken), until the cleaner's retention. How many parked tasks it
        woke (0: it was kept for a wait to come).

        Example:

        ```python
        with txqueue.transaction(conn):  # with the approver's own writes
            woke = txqueue.signal(conn, "approval:42", {"approved": True, "by": "ops"})
        print(woke)  # 0: no wait is parked on the key yet, so it is kept for the next one
        ```
        """
        key, text = _checked(key, payload)
        bound = bind(conn, self._store)
        return run(signalling(bound, key, text, self._delivery), bound)

    async def signal_async(self, conn: object, key: str, payload: Any = None) -> int:
        """``signal`` on an asyncio connection (any ``enqueue_async`` takes).

        Example:

        ```python
        woke = await txqueue.signal_async(conn, "approval:42", {"approved": True})
        ```
        """
        key, text = _checked(key, payload)
        bound = await bind_async(conn, self._store)
        return await run_async(signalling(bound, key, text, self._delivery), bound)


def signalling(
    bound: Bound[Any] | AsyncBound, key: str, payload: str, delivery: Delivery | None
) -> Plan[int]:
    """Send the signal, then the wake-ups of the tasks it woke; how many."""
    moved: list[Moved] = yield call(Manage.signal, key, payload)
    yield from waking(bound, wakeups(moved), delivery)
    return len(moved)


def _checked(key: object, payload: Any) -> tuple[str, str]:
    return check_signal_key(key), encode_json(payload, "payload")
