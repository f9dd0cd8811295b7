"""The rules of a task's life, as a small model in plain Python: the specification the
state machine (``test_model.py``) holds both real stores to.

It imports nothing of txqueue's: states, moves and policies are its own strings, and each
rule is written here from the documentation (docs/explanation/lifecycle.md's table of
moves), not from the code it checks. Time is the model's own clock, in whole seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PENDING, RUNNING, WAITING, PARKED = "pending", "running", "waiting", "parked"
SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"
FINISHED = (SUCCEEDED, FAILED, CANCELLED)
LIVE = (PENDING, RUNNING, WAITING, PARKED)  # a unique key is held by its live task
CANCEL, SKIP, RUN = "cancel", "skip", "run"  # what a parent's failure does to a child
POLICIES = (CANCEL, SKIP, RUN)

Event = tuple[str, int, str, str]  # (move, attempt, from, to)
# Workflows as the model writes them: (step, {parent: edge index}), parents first; each
# edge takes its policy from the example.
SHAPES: dict[str, list[tuple[str, dict[str, int]]]] = {
    "chain": [("a", {}), ("b", {"a": 0}), ("c", {"b": 1})],
    "join": [("a", {}), ("b", {}), ("c", {"a": 0, "b": 1})],
    "diamond": [("a", {}), ("b", {"a": 0}), ("c", {"a": 1}), ("d", {"b": 2, "c": 3})],
}


@dataclass
class Task:
    key: str  # the model's name for it; the store's id is the harness's business
    priority: int
    max_attempts: int
    run_at: float
    unique_key: str | None = None
    account: str | None = None  # its concurrency key: one running at a time per account
    state: str = PENDING
    attempts: int = 0
    worker: str | None = None
    expires: float | None = None
    cancel_requested: bool = False
    events: list[Event] = field(default_factory=list)
    # A workflow's step: its parents and the edge's policy; the parents not ended yet.
    parents: dict[str, str] = field(default_factory=dict)
    waits: set[str] = field(default_factory=set)
    step: bool = False
    workflow: str | None = None
    finished: float | None = None  # when it last ended, while it has

    def move(self, move: str, to: str, attempt: int | None = None) -> None:
        self.events.append((move, self.attempts if attempt is None else attempt, self.state, to))
        self.state = to


class Model:
    """Every task the test made, by its key, and the clock."""

    def __init__(self, lease: float) -> None:
        self.lease = lease
        self.now = 0.0
        self.tasks: dict[str, Task] = {}
        self.paused = False
        # Attempts that lost their task (recovered, released, given back): their outcome
        # must be fenced out. (task key, attempt, worker)
        self.stale: list[tuple[str, int, str]] = []

    # --- what may happen ------------------------------------------------------------------

    def holder(self, unique_key: str) -> Task | None:
        return next(
            (t for t in self.tasks.values() if t.unique_key == unique_key and t.state in LIVE),
            None,
        )

    def claimable(self) -> list[Task]:
        if self.paused:
            return []
        busy = {t.account for t in self.running()}
        return [
            t
            for t in self.tasks.values()
            if t.state == PENDING
            and t.run_at <= self.now
            and (t.account is None or t.account not in busy)
        ]

    def running(self) -> list[Task]:
        return [t for t in self.tasks.values() if t.state == RUNNING]

    def expired(self) -> list[Task]:
        return [t for t in self.running() if t.expires is not None and t.expires <= self.now]

    # --- the moves ------------------------------------------------------------------------

    def enqueue(
        self,
        key: str,
        priority: int,
        max_attempts: int,
        delay: float,
        unique_key: str | None,
        account: str | None = None,
    ) -> Task:
        task = Task(key, priority, max_attempts, self.now + delay, unique_key, account)
        self.tasks[key] = task
        return task

    def plan(
        self, workflow: str, steps: list[tuple[str, dict[str, str]]], max_attempts: int
    ) -> None:
        """A workflow: each step (key, parents' keys with their policy), parents first."""
        for key, parents in steps:
            task = self.enqueue(key, 0, max_attempts, 0.0, None)
            task.step = True
            task.workflow = workflow
            task.parents = dict(parents)
            task.waits = set(parents)
            if parents:
                task.state = WAITING

    def claim(self, task: Task, worker: str) -> None:
        assert task in self.claimable()
        task.attempts += 1
        self._move(task, "claimed", RUNNING)
        task.worker = worker
        task.expires = self.now + self.lease

    def succeed(self, task: Task) -> None:
        self._end(task, "succeeded", SUCCEEDED)

    def fail(self, task: Task, backoff: float) -> None:
        """The attempt raised: run again after ``backoff`` while attempts are left (unless
        its cancel was asked: then it ends cancelled), else failed."""
        if task.attempts < task.max_attempts:
            self._end(task, "retried", CANCELLED if task.cancel_requested else PENDING)
            task.run_at = self.now + backoff
        else:
            self._end(task, "failed", FAILED)

    def park(self, task: Task, seconds: float) -> None:
        """The handler sleeps (or waits): parked until ``seconds`` from now, an attempt
        added to its budget; or cancelled, if that was asked meanwhile."""
        self._move(task, "parked", CANCELLED if task.cancel_requested else PARKED)
        if task.state == PARKED:
            task.max_attempts += 1
        task.worker = None
        task.run_at = self.now + seconds
        self._after(task)

    def parked_due(self) -> list[Task]:
        return [t for t in self.tasks.values() if t.state == PARKED and t.run_at <= self.now]

    def wake(self, task: Task) -> None:
        """Its time came: pending, due now."""
        self._move(task, "woken", PENDING)
        task.run_at = self.now

    def give_back(self, task: Task) -> None:
        """Claimed ahead, never started: where it was, its attempt uncounted; or cancelled."""
        self._lose(task)
        to = CANCELLED if task.cancel_requested else PENDING
        self._move(task, "given back", to)
        task.attempts -= 1
        task.worker = None
        self._after(task)

    def release(self, task: Task) -> None:
        """A stopping worker gives up a running task: pending again at once (the retry
        policy), the attempt counted; or cancelled."""
        self._lose(task)
        self._move(task, "released", CANCELLED if task.cancel_requested else PENDING)
        task.run_at = self.now
        self._after(task)

    def recover(self, task: Task) -> None:
        """Its lease expired: cancelled if asked, again while attempts are left, else failed."""
        self._lose(task)
        if task.cancel_requested:
            to = CANCELLED
        elif task.attempts < task.max_attempts:
            to = PENDING
        else:
            to = FAILED
        self._move(task, "recovered", to)
        task.run_at = self.now
        self._after(task)

    def cancel(self, task: Task) -> str | None:
        """By hand: pending, waiting or parked ends cancelled; running is asked to stop."""
        if task.state in (PENDING, WAITING, PARKED):
            self._move(task, "cancel", CANCELLED)
            self._after(task)
            return CANCELLED
        if task.state == RUNNING:
            self._move(task, "cancel", RUNNING)
            task.cancel_requested = True
            return RUNNING
        return None

    def cancel_many(self, tasks: list[Task]) -> int:
        """In bulk, the tasks in the order of their ids: each pending, waiting or running
        one (but one already asked to stop) cancelled in one write, then what their ends
        do to their children; how many it changed."""
        picked = [t for t in tasks if t.state in LIVE and not t.cancel_requested]
        for task in picked:
            if task.state == RUNNING:
                self._move(task, "cancel", RUNNING)
                task.cancel_requested = True
            else:
                self._move(task, "cancel", CANCELLED)
        for task in picked:
            self._after(task)
        return len(picked)

    def retry_many(self, tasks: list[Task]) -> int:
        """In bulk, the tasks in the order of their ids: each failed or cancelled one whose
        unique key no live task holds, and no earlier one of the batch, retried in one
        write (a step held back by its parents left); then the steps their ends had blocked
        rearmed. How many it retried."""
        keys: set[str] = set()
        once = []
        for task in tasks:
            if task.state not in (FAILED, CANCELLED):
                continue
            key = task.unique_key
            if key is not None and (key in keys or self.holder(key) is not None):
                continue
            if key is not None:
                keys.add(key)
            once.append(task)
        retried = [t for t in once if not self._held_back(t)]
        for task in retried:
            self._retried(task)
        self._rearm({t.key for t in retried if t.step})
        return len(retried)

    def retry(self, task: Task) -> bool:
        """By hand, a failed or cancelled task: pending now, with an attempt more if it had
        none left; refused while another live task holds its unique key, and for a step
        whose parents hold it back. A step's retry sets waiting again the steps its end had
        blocked or skipped."""
        if task.state not in (FAILED, CANCELLED) or self._held_back(task):
            return False
        if task.unique_key is not None and self.holder(task.unique_key) is not None:
            return False
        self._retried(task)
        if task.step:
            self._rearm({task.key})
        return True

    def _retried(self, task: Task) -> None:
        self._move(task, "retry", PENDING)
        task.run_at = self.now
        task.cancel_requested = False
        task.max_attempts = max(task.max_attempts, task.attempts + 1)

    def _held_back(self, step: Task) -> bool:
        """A step does not run while a parent has not ended, or one it does not run
        without has not succeeded: its retry is refused (retry that parent instead)."""
        return bool(step.waits) or any(
            p in self.tasks and self.tasks[p].state != SUCCEEDED
            for p, on in step.parents.items()
            if on != RUN
        )

    def pause(self, paused: bool) -> None:
        self.paused = paused

    def prune(self, age: float) -> None:
        """The cleaner's prune, every finished state by one ``age``: a task that ended more
        than ``age`` ago is gone; a workflow's step only once every step of it did (a step
        readied reads its parents' results). A parent gone no longer holds a step back."""

        def old(task: Task) -> bool:
            return task.finished is not None and task.finished < self.now - age

        gone = [
            t.key
            for t in self.tasks.values()
            if old(t)
            and (
                t.workflow is None
                or all(old(o) for o in self.tasks.values() if o.workflow == t.workflow)
            )
        ]
        for key in gone:
            del self.tasks[key]
        self.stale = [s for s in self.stale if s[0] in self.tasks]

    # --- what an end does ---------------------------------------------------------------

    def _move(self, task: Task, move: str, to: str, attempt: int | None = None) -> None:
        task.move(move, to, attempt)
        task.finished = self.now if to in FINISHED else None

    def _end(self, task: Task, move: str, to: str) -> None:
        self._move(task, move, to)
        task.worker = None
        self._after(task)

    def _lose(self, task: Task) -> None:
        assert task.worker is not None
        self.stale.append((task.key, task.attempts, task.worker))

    def _after(self, task: Task) -> None:
        if task.state != RUNNING:
            task.expires = None
        if task.state in FINISHED and task.step:
            self._ended(task)

    def _ended(self, parent: Task) -> None:
        """A step ended: each child waiting for it is blocked or skipped at once by a
        failure its edge does not run through; else readied when no parent is left."""
        for child in self.tasks.values():
            if parent.key not in child.waits:
                continue
            child.waits.discard(parent.key)
            if child.state != WAITING:
                continue
            policy = child.parents[parent.key]
            if parent.state != SUCCEEDED and policy != RUN:
                self._move(child, "skipped" if policy == SKIP else "blocked", CANCELLED)
                self._ended(child)
            elif not child.waits:
                self._move(child, "readied", PENDING)
                child.run_at = max(child.run_at, self.now)

    def _rearm(self, retried: set[str]) -> None:
        again = set(retried)
        grew = True
        while grew:
            grew = False
            for child in self.tasks.values():
                if child.key in again or not self._blocked(child):
                    continue
                if any(p in again for p in child.parents) and all(
                    self._clear(p, policy, again) for p, policy in child.parents.items()
                ):
                    again.add(child.key)
                    grew = True
        for key in sorted(again - retried):
            child = self.tasks[key]
            self._move(child, "rearmed", WAITING)
            child.waits |= {p for p in child.parents if p in again}

    def _blocked(self, task: Task) -> bool:
        return (
            task.state == CANCELLED
            and bool(task.events)
            and task.events[-1][0] in ("blocked", "skipped")
        )

    def _clear(self, parent: str, policy: str, again: set[str]) -> bool:
        if parent not in self.tasks:
            return True
        state = self.tasks[parent].state
        return parent in again or state == SUCCEEDED or state not in FINISHED or policy == RUN
