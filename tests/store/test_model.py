"""Every task's life, checked against a model: random sequences of enqueues, workflows,
claims, outcomes, parks and wakes, give-backs, releases, lease expiries and recoveries,
cancels and retries by hand and in bulk, pauses, prunes and moves of the clock, driven on
each real store, with every task's state, attempt and history compared with the model
(``tests/model/spec.py``) and the invariants checked after every step.

The suite runs a few examples per store; many more, for a nightly job:

    TXQUEUE_MODEL_EXAMPLES=5000 .venv/bin/pytest -o timeout=0 tests/store/test_model.py

A failure prints the shrunk sequence of steps as code, and a ``@reproduce_failure`` line
that replays it; ``--hypothesis-seed=N`` replays a whole run.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import uuid
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.model import spec
from tests.model.spec import SHAPES, Model
from txqueue import Event, Task
from txqueue.core.ids import uuid7
from txqueue.core.task import TaskState
from txqueue.errors import StoreError
from txqueue.operations.filters import TaskFilter
from txqueue.store.records import BulkOrder, ClaimDefaults, Outcome, Planned, Poll, WorkflowPlan
from txqueue.store.settings import QueueChange
from txqueue.testing.conformance import StoreCase, defaults

LEASE = 60.0
KEYED = defaults(
    "t",
    timeout=LEASE,
    per_name={"k": {"concurrency": {"arg": "account", "default": None, "limit": 1}}},
)
PRUNE_AGE = 45.0  # between the clock's steps (multiples of 30 s): no tie at the cut
EXAMPLES = int(os.environ.get("TXQUEUE_MODEL_EXAMPLES", "12"))

BULK = {
    "cancel": (TaskState.PENDING, TaskState.WAITING, TaskState.PARKED, TaskState.RUNNING),
    "retry": (TaskState.FAILED, TaskState.CANCELLED),
}
FIRST, LAST = uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)
POLICIES = st.lists(st.sampled_from([spec.CANCEL, spec.SKIP, spec.RUN]), min_size=4, max_size=4)


class Lives(RuleBasedStateMachine):
    """One store, one queue of its own per example; the model beside it."""

    s: StoreCase

    def __init__(self) -> None:
        super().__init__()
        self.queue = f"m{uuid.uuid4().hex[:10]}"
        self.model = Model(LEASE)
        self.ids: dict[str, uuid.UUID] = {}
        self.keys: dict[uuid.UUID, str] = {}
        self.workers = 0
        self.made = 0
        self.claimed: dict[str, tuple[int, str]] = {}  # key: (attempt, worker) of a running one

    # --- helpers ------------------------------------------------------------------------

    def _name(self) -> str:
        self.made += 1
        return f"t{self.made}"

    def _worker(self) -> str:
        self.workers += 1
        return f"w{self.workers}"

    def _held(self, key: str) -> list[tuple[uuid.UUID, int]]:
        return [(self.ids[key], self.claimed[key][0])]

    def _defaults(self) -> ClaimDefaults:
        """A worker's claims: the keyed path once a keyed task was enqueued, else the plain."""
        if any(t.account is not None for t in self.model.tasks.values()):
            return KEYED
        return defaults("t", "k", timeout=LEASE)

    def _app(self) -> Any:
        return contextlib.closing(self.s.app())

    def _took(self, key: str, task_id: uuid.UUID) -> None:
        self.ids[key] = task_id
        self.keys[task_id] = key

    # --- enqueue ------------------------------------------------------------------------

    @rule(
        priority=st.integers(0, 2),
        max_attempts=st.integers(1, 3),
        delay=st.sampled_from([0, 60]),
        unique=st.sampled_from([None, None, "k1", "k2"]),
        account=st.sampled_from([None, None, "x", "y"]),
    )
    def enqueue(
        self, priority: int, max_attempts: int, delay: int, unique: str | None, account: str | None
    ) -> None:
        key = self._name()
        name = "t" if account is None else "k"  # "k": one at a time per account (KEYED)
        unique_key = None if unique is None else f"{self.queue}:{name}:{unique}"
        holder = None if unique_key is None else self.model.holder(unique_key)
        task = Task(
            name,
            # Keys span queues: an earlier example's running tasks must not hold this one's.
            {} if account is None else {"account": f"{self.queue}:{account}"},
            queue=self.queue,
            priority=priority,
            max_attempts=max_attempts,
            delay=delay or None,
            unique_key=unique_key,
        )
        [inserted] = self.s.insert(task)
        if holder is not None:
            assert (inserted.new, inserted.id) == (False, self.ids[holder.key])
            return
        assert inserted.new
        self.model.enqueue(key, priority, max_attempts, delay, unique_key, account)
        self._took(key, inserted.id)

    @rule(shape=st.sampled_from(sorted(SHAPES)), policies=POLICIES, max_attempts=st.integers(1, 2))
    def workflow(self, shape: str, policies: list[str], max_attempts: int) -> None:
        prefix = self._name()
        steps = [
            (f"{prefix}{name}", {f"{prefix}{p}": policies[i] for p, i in parents.items()})
            for name, parents in SHAPES[shape]
        ]
        for key, _ in steps:
            self._took(key, uuid7())
        planned = [
            Planned(
                self.ids[key],
                Task("t", {}, queue=self.queue, max_attempts=max_attempts),
                key,
                {str(self.ids[p]): policy for p, policy in parents.items()},
                {},
            )
            for key, parents in steps
        ]
        with self._app() as c:
            self.s.store.insert_workflow(c, WorkflowPlan(uuid7(), shape, planned))
            c.commit()
        self.model.plan(prefix, steps, max_attempts)

    # --- claims -------------------------------------------------------------------------

    def _claimed(self, key: str, attempts: int, worker: str) -> None:
        self.model.claim(self.model.tasks[key], worker)
        assert attempts == self.model.tasks[key].attempts
        self.claimed[key] = (attempts, worker)

    @rule(limit=st.integers(1, 3))
    def poll(self, limit: int) -> None:
        worker = self._worker()
        claimable = {t.key: t for t in self.model.claimable()}
        got = self.s.store.claim_ripe(
            self.s.conn, Poll(self.queue, limit, worker, self._defaults())
        ).claimed
        keys = [self.keys[c.id] for c in got]
        assert set(keys) <= set(claimable), (keys, sorted(claimable))
        ripe = [t for t in self.model.tasks.values() if t.state == spec.PENDING]
        if any(t.account is not None and t.run_at <= self.model.now for t in ripe):
            # A poll reads ``limit`` candidates and drops those whose key is full (taken in
            # this poll or by a running task, which leaves it out of ``claimable``): fewer
            # may come, but none passed over for a lower priority.
            assert len(keys) <= min(limit, len(claimable))
            left = [t.priority for k, t in claimable.items() if k not in keys and not t.account]
        else:
            assert len(keys) == min(limit, len(claimable))
            left = [t.priority for k, t in claimable.items() if k not in keys]
        assert not left or not keys or min(claimable[k].priority for k in keys) >= max(left)
        for c in got:
            self._claimed(self.keys[c.id], c.attempts, worker)

    @rule(data=st.data())
    @precondition(lambda self: self.model.tasks)
    def claim_by_id(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.model.tasks)))
        worker = self._worker()
        expected = self.model.tasks[key] in self.model.claimable()
        got = self.s.store.claim_ids(self.s.conn, [self.ids[key]], worker, self._defaults())
        assert len(got) == int(expected), (key, self.model.tasks[key])
        if got:
            self._claimed(key, got[0].attempts, worker)

    # --- a running task's end -------------------------------------------------------------

    def _running(self, data: st.DataObject) -> spec.Task:
        return data.draw(st.sampled_from(sorted(self.model.running(), key=lambda t: t.key)))

    def _outcome(self, key: str, state: str, retry_in: float = 0.0) -> dict[uuid.UUID, str]:
        attempt, worker = self.claimed.pop(key)
        error = None
        if state not in (spec.SUCCEEDED, spec.PARKED):
            error = {"attempt": attempt, "type": "ValueError", "message": "boom", "traceback": None}
        out = Outcome(self.ids[key], attempt, worker, state, error=error, retry_in=retry_in)
        return self.s.store.record_outcomes(self.s.conn, [out])

    @rule(data=st.data())
    @precondition(lambda self: self.model.running())
    def succeed(self, data: st.DataObject) -> None:
        task = self._running(data)
        written = self._outcome(task.key, spec.SUCCEEDED)
        self.model.succeed(task)
        assert written[self.ids[task.key]] == spec.SUCCEEDED

    @rule(data=st.data(), backoff=st.sampled_from([0, 60]))
    @precondition(lambda self: self.model.running())
    def fail(self, data: st.DataObject, backoff: int) -> None:
        task = self._running(data)
        # The handler raised: the worker asks for a retry while attempts are left.
        asks = spec.PENDING if task.attempts < task.max_attempts else spec.FAILED
        written = self._outcome(task.key, asks, float(backoff))
        self.model.fail(task, backoff)
        assert written[self.ids[task.key]] == task.state

    @rule(data=st.data(), seconds=st.sampled_from([0, 60]))
    @precondition(lambda self: self.model.running())
    def park(self, data: st.DataObject, seconds: int) -> None:
        task = self._running(data)
        written = self._outcome(task.key, spec.PARKED, float(seconds))
        self.model.park(task, seconds)
        assert written[self.ids[task.key]] == task.state

    @rule(data=st.data())
    @precondition(lambda self: self.model.running())
    def give_back(self, data: st.DataObject) -> None:
        task = self._running(data)
        attempt, worker = self.claimed.pop(task.key)
        given = self.s.store.give_back(self.s.conn, worker, [(self.ids[task.key], attempt)])
        self.model.give_back(task)
        assert given == 1

    @rule(data=st.data())
    @precondition(lambda self: self.model.running())
    def release(self, data: st.DataObject) -> None:
        task = self._running(data)
        attempt, worker = self.claimed.pop(task.key)
        released = self.s.store.release(self.s.conn, worker, [(self.ids[task.key], attempt)])
        self.model.release(task)
        assert released[self.ids[task.key]] == task.state

    @rule(data=st.data(), state=st.sampled_from([spec.SUCCEEDED, spec.FAILED, spec.PENDING]))
    @precondition(lambda self: self.model.stale)
    def late_outcome(self, data: st.DataObject, state: str) -> None:
        key, attempt, worker = data.draw(st.sampled_from(self.model.stale))
        before = self.s.row(self.ids[key])
        late = Outcome(self.ids[key], attempt, worker, state)
        assert self.s.store.record_outcomes(self.s.conn, [late]) == {}
        assert self.s.row(self.ids[key]) == before  # fenced out: nothing written

    # --- time and the cleaner ---------------------------------------------------------

    @rule(seconds=st.sampled_from([30, 60, 90]))
    def advance(self, seconds: int) -> None:
        self.s.advance(seconds)
        self.model.now += seconds

    @rule()
    def recover(self) -> None:
        expired = sorted(self.model.expired(), key=lambda t: t.key)
        recovered = self.s.store.recover_expired(self.s.conn, 1000, 5)
        ours = {self.keys[r.id]: r.state for r in recovered if r.id in self.keys}
        for task in expired:
            self.claimed.pop(task.key)
            self.model.recover(task)
        assert ours == {t.key: t.state for t in expired}

    @rule()
    def wake(self) -> None:
        due = sorted(self.model.parked_due(), key=lambda t: t.key)
        woken = self.s.store.wake_parked(self.s.conn, 1000, [], "cleaner")
        for task in due:
            self.model.wake(task)
        assert woken >= len(due)  # other examples' parked tasks too

    @rule()
    def prune(self) -> None:
        # Other examples' tasks are pruned too: the invariants check this queue's rows.
        for state in spec.FINISHED:
            self.s.store.prune(self.s.conn, state, PRUNE_AGE, 1000)
        self.model.prune(PRUNE_AGE)

    # --- by hand ------------------------------------------------------------------------

    @rule(data=st.data())
    @precondition(lambda self: self.model.tasks)
    def cancel(self, data: st.DataObject) -> None:
        task = self.model.tasks[data.draw(st.sampled_from(sorted(self.model.tasks)))]
        with self._app() as c:
            got = self.s.store.cancel(c, self.ids[task.key], by="tester")
            c.commit()
        assert got == self.model.cancel(task)

    @rule(data=st.data())
    @precondition(lambda self: self.model.tasks)
    def retry(self, data: st.DataObject) -> None:
        task = self.model.tasks[data.draw(st.sampled_from(sorted(self.model.tasks)))]
        with self._app() as c:
            try:
                moved = self.s.store.retry_ids(c, [self.ids[task.key]], "tester")
                c.commit()
            except StoreError:  # its unique key is taken: nothing retried
                c.rollback()
                moved = []
        assert bool(moved) == self.model.retry(task)

    @rule(action=st.sampled_from(["cancel", "retry"]))
    def bulk(self, action: str) -> None:
        states = BULK[action]
        where = TaskFilter(queue=self.queue)
        order = BulkOrder(action, where, states, LAST, 1000, "ops")
        done = self.s.store.bulk_batch(self.s.conn, order, FIRST)
        ordered = sorted(self.model.tasks.values(), key=lambda t: self.ids[t.key])
        many = self.model.cancel_many if action == "cancel" else self.model.retry_many
        assert done.changed == many(ordered)

    @rule(paused=st.booleans())
    def pause(self, paused: bool) -> None:
        with self._app() as c:
            self.s.store.change_queue(c, self.queue, QueueChange(frozenset({"paused"}), paused))
            c.commit()
        self.model.pause(paused)

    # --- after every step -------------------------------------------------------------

    @invariant()
    def rows_follow_the_model(self) -> None:
        rows = {self.keys[r["id"]]: r for r in self.s.rows("queue = %s", (self.queue,))}
        assert set(rows) == set(self.model.tasks)
        for key, task in self.model.tasks.items():
            row = rows[key]
            seen = (row["state"], row["attempts"], row["cancel_requested"])
            assert seen == (task.state, task.attempts, task.cancel_requested), (key, task)
            stored = [Event.of_json(e) for e in row["events"]]
            events = [(e.move, e.attempt, e.from_state, e.to_state) for e in stored]
            assert events == [e for e in task.events if e[0] != "claimed"], key
            assert (row["finished_at"] is not None) == (task.state in spec.FINISHED), key
            assert replays(row), key
        live = [t.unique_key for t in self.model.tasks.values() if t.state in spec.LIVE]
        keyed = [k for k in live if k is not None]
        assert len(keyed) == len(set(keyed))
        running = [r["concurrency_key"] for r in rows.values() if r["state"] == spec.RUNNING]
        accounts = [k for k in running if k is not None]
        assert len(accounts) == len(set(accounts)), running  # one at a time per account

    @invariant()
    def no_step_runs_before_its_parents(self) -> None:
        for task in self.model.tasks.values():
            if task.state not in (spec.PENDING, spec.RUNNING, spec.SUCCEEDED, spec.FAILED):
                continue
            for parent, policy in task.parents.items():
                if policy != spec.RUN and parent in self.model.tasks:  # else pruned
                    assert self.model.tasks[parent].state == spec.SUCCEEDED, (task, parent)


def replays(row: dict[str, Any]) -> bool:
    """The row's history, replayed from its first state, ends in the row's state (a claim
    writes no event: between two events, and after the last, pending may become running)."""
    states = [(e.from_state, e.to_state) for e in map(Event.of_json, row["events"])]
    claimed = (spec.PENDING, spec.RUNNING)
    for (_, before), (after, _) in itertools.pairwise(states):
        if after != before and (before, after) != claimed:
            return False
    if not states:
        return row["state"] in (spec.PENDING, spec.WAITING, spec.RUNNING)
    last = states[-1][1]
    return last == row["state"] or (last, row["state"]) == claimed


def test_every_task_follows_the_model(s: StoreCase) -> None:
    Lives.s = s
    run_state_machine_as_test(
        Lives,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=30,
            deadline=None,
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
