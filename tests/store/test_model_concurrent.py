"""The model's rules under concurrency: the two parents of many joins end at the same
instant, on two connections released by a barrier (give-backs of steps whose cancel was
asked, releases, successes, failures), and every child is checked against what the rules
make of its parents' ends, in whatever order they landed. The rules are confluent: the
child's state depends on how its parents ended, never on which ended first.

    TXQUEUE_MODEL_JOINS=5000 .venv/bin/pytest tests/store/test_model_concurrent.py

runs more joins (a nightly job); a failure names the seed, which ``TXQUEUE_MODEL_SEED``
replays (the interleaving itself is the machine's).
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.model import spec
from txqueue import Task
from txqueue.core.ids import uuid7
from txqueue.store.records import Outcome, Planned, WorkflowPlan
from txqueue.testing.conformance import StoreCase, defaults

JOINS = int(os.environ.get("TXQUEUE_MODEL_JOINS", "200"))
SEED = int(os.environ.get("TXQUEUE_MODEL_SEED", str(random.randrange(2**32))))
BATCH = 50  # joins written, claimed and checked together

# What ends a parent, by which worker's call, and the state it leaves: (the parent's cancel
# was asked) -> state. A give-back or release of a step whose cancel was asked ends it.
ENDS: dict[str, Callable[[bool], str]] = {
    "succeed": lambda asked: spec.SUCCEEDED,
    "fail": lambda asked: spec.FAILED,
    "give back": lambda asked: spec.CANCELLED if asked else spec.PENDING,
    "release": lambda asked: spec.CANCELLED if asked else spec.PENDING,
}


def end(s: StoreCase, conn: Any, how: str, task_id: uuid.UUID, attempt: int, worker: str) -> None:
    held = [(task_id, attempt)]
    if how == "give back":
        s.store.give_back(conn, worker, held)
    elif how == "release":
        s.store.release(conn, worker, held)
    else:
        state = spec.SUCCEEDED if how == "succeed" else spec.FAILED
        s.store.record_outcomes(conn, [Outcome(task_id, attempt, worker, state, step=True)])


def child_after(parents: list[tuple[str, str]]) -> str:
    """What the rules make of a child from its parents' states and edges' policies."""
    for state, policy in parents:
        if state in (spec.FAILED, spec.CANCELLED) and policy != spec.RUN:
            return spec.CANCELLED
    if all(state in spec.FINISHED for state, _ in parents):
        return spec.PENDING
    return spec.WAITING


@pytest.mark.unsupported(sqlite="a writer holds the whole file: no two ends ever overlap")
def test_sibling_parents_ending_at_once_leave_each_child_as_the_rules_say(s: StoreCase) -> None:
    rng = random.Random(SEED)
    conns = [s.store.connect(s.url) for _ in range(2)]
    try:
        for start in range(0, JOINS, BATCH):
            joins = [Join(rng) for _ in range(min(BATCH, JOINS - start))]
            with contextlib.closing(s.app()) as app:
                for j in joins:
                    s.store.insert_workflow(app, j.plan())
                app.commit()
            for j in joins:
                j.claim(s)
            for j in joins:
                j.race(s, conns)
            rows = {r["id"]: r["state"] for r in s.rows("id = ANY(%s)", ([*Join.ids(joins)],))}
            for j in joins:
                assert j.check(rows), f"{j} (seed {SEED})"
    finally:
        for c in conns:
            c.close()


class Join:
    """C after A and B: each parent claimed, A's cancel maybe asked, then both ended at once."""

    def __init__(self, rng: random.Random) -> None:
        self.a, self.b, self.c = uuid7(), uuid7(), uuid7()
        self.policies = (rng.choice(spec.POLICIES), rng.choice(spec.POLICIES))
        # Weighted toward the race that needs it most: A given back, its cancel asked, as
        # B succeeds (the race that ran a child of a cancelled parent).
        self.ends = (
            rng.choice(["give back"] * 3 + sorted(ENDS)),
            rng.choice(["succeed"] * 3 + sorted(ENDS)),
        )
        self.asked = rng.random() < 0.75
        self.workers = (f"wa{uuid.uuid4().hex[:6]}", f"wb{uuid.uuid4().hex[:6]}")
        self.attempts = (0, 0)

    def __repr__(self) -> str:
        return f"Join(ends={self.ends}, policies={self.policies}, a's cancel asked={self.asked})"

    @staticmethod
    def ids(joins: list[Join]) -> list[str]:
        return [str(i) for j in joins for i in (j.a, j.b, j.c)]

    def plan(self) -> WorkflowPlan:
        def step(i: uuid.UUID, name: str, parents: dict[str, str]) -> Planned:
            return Planned(i, Task("t", {}, queue="q", max_attempts=1), name, parents, {})

        parents = {str(self.a): self.policies[0], str(self.b): self.policies[1]}
        steps = [step(self.a, "a", {}), step(self.b, "b", {}), step(self.c, "c", parents)]
        return WorkflowPlan(uuid7(), "join", steps)

    def claim(self, s: StoreCase) -> None:
        [a] = s.claim(self.a, worker=self.workers[0], with_=defaults(max_attempts=1))
        [b] = s.claim(self.b, worker=self.workers[1], with_=defaults(max_attempts=1))
        self.attempts = (a.attempts, b.attempts)
        if self.asked:
            with contextlib.closing(s.app()) as app:
                s.store.cancel(app, self.a, by="tester")
                app.commit()

    def race(self, s: StoreCase, conns: list[Any]) -> None:
        barrier = threading.Barrier(2, timeout=30)
        errors: list[BaseException] = []

        def side(k: int) -> None:
            task = (self.a, self.b)[k]
            try:
                barrier.wait()
                end(s, conns[k], self.ends[k], task, self.attempts[k], self.workers[k])
            except BaseException as e:  # handed to the test, which raises it
                errors.append(e)

        threads = [threading.Thread(target=side, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        if errors:
            raise AssertionError(f"{self} (seed {SEED})") from errors[0]

    def check(self, rows: dict[uuid.UUID, str]) -> bool:
        a = ENDS[self.ends[0]](self.asked)
        b = ENDS[self.ends[1]](False)
        expected = (a, b, child_after([(a, self.policies[0]), (b, self.policies[1])]))
        return (rows[self.a], rows[self.b], rows[self.c]) == expected
