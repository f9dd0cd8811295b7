"""Workflow steps ending at once: a child is decided by the parent whose end comes second,
in the transaction that ends it, whatever the kind of end (an outcome, a give-back, a
cancel). Each test holds one parent's follow-up between its statements (``held``) while a
sibling parent ends, then lets it go."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ....core.task import CANCELLED, RUNNING, SUCCEEDED
from ....store.records import Outcome
from ....workflows.readiness import OnFailure
from ..case import WORKER, StoreCase, defaults
from .workflows import step, write


class Hold:
    """One call of a store method, by one thread, stopped before it runs until ``go``."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.go = threading.Event()


@contextlib.contextmanager
def held(
    monkeypatch: pytest.MonkeyPatch, store: Any, method: str, thread: Callable[[], bool]
) -> Iterator[Hold]:
    """Hold the first call of ``store.method`` made where ``thread()`` is true."""
    hold = Hold()
    real = getattr(store, method)

    def holding(*args: Any) -> Any:
        if thread() and not hold.reached.is_set():
            hold.reached.set()
            assert hold.go.wait(30), "the hold was never released"
        return real(*args)

    monkeypatch.setattr(store, method, holding)
    try:
        yield hold
    finally:
        hold.go.set()


def in_thread(run: Callable[[], Any], name: str) -> tuple[threading.Thread, list[Any]]:
    """``run()`` started in a thread of its own, named before it starts (so a hold can tell
    it at once); its result (or exception) lands in the list."""
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(run())
        except BaseException as e:  # handed to the test, which raises it
            out.append(e)

    t = threading.Thread(target=target, name=name, daemon=True)
    t.start()
    return t, out


def done_or_blocked(s: StoreCase, t: threading.Thread, within: float = 2.0) -> None:
    """Wait until ``t`` has finished, or waits for a lock (where the store can tell; else
    until ``within`` seconds have passed)."""
    deadline = time.monotonic() + within
    while t.is_alive() and time.monotonic() < deadline:
        if s.kind.lock_waiters is not None and s.kind.lock_waiters(s.url) > 0:
            return
        time.sleep(0.01)


def result(out: list[Any]) -> Any:
    [value] = out
    if isinstance(value, BaseException):
        raise value
    return value


def test_a_given_back_parent_whose_cancel_was_asked_blocks_a_join_its_sibling_readies_meanwhile(
    s: StoreCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # C after A and B. A's cancel is asked while a worker holds it claimed and unstarted;
    # the worker gives it back (it ends cancelled) as B succeeds.
    a, b = step("a"), step("b")
    c = step("c", {a.id: OnFailure.CANCEL, b.id: OnFailure.CANCEL})
    write(s, a, b, c)
    [claimed_a, claimed_b] = s.claim(a.id, b.id, with_=defaults(max_attempts=1))
    with contextlib.closing(s.app()) as app:
        assert s.store.cancel(app, a.id, by="tester") == RUNNING
        app.commit()

    giver = s.store.connect(s.url)
    recorder = s.store.connect(s.url)
    try:
        with held(
            monkeypatch, s.store, "_children", lambda: threading.current_thread().name == "a"
        ) as hold:
            t_a, out_a = in_thread(
                lambda: s.store.give_back(giver, WORKER, [(a.id, claimed_a.attempts)]), "a"
            )
            assert hold.reached.wait(10), "A's give-back never came to its children"
            success = Outcome(b.id, claimed_b.attempts, WORKER, SUCCEEDED, step=claimed_b.step)
            t_b, out_b = in_thread(lambda: s.store.record_outcomes(recorder, [success]), "b")
            done_or_blocked(s, t_b)
            hold.go.set()
            t_a.join(30)
            t_b.join(30)
        assert result(out_a) == 1  # the give-back counts A, not the child it ended
        assert result(out_b)[b.id] == SUCCEEDED
    finally:
        giver.close()
        recorder.close()

    states = {r["step"]: r["state"] for r in s.rows()}
    assert states == {"a": CANCELLED, "b": SUCCEEDED, "c": CANCELLED}
    assert s.claim(c.id) == []
