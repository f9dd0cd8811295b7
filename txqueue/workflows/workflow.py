"""Workflows declared in Python: steps, the edges between them, and what a step takes
from its parents.

A ``Workflow`` is a graph of steps built in order: a step's parents are steps declared
before it, so the graph has no cycle, and ``after`` refuses one it would close. A
step's argument given ``parent.result`` (typed as the parent's return type, so mypy
checks the pairing) or a list of them (``Workflow.results``) is an edge: the step waits
for that parent and receives its stored result when it runs. ``parent.outcome`` takes
the parent's ``Outcome`` instead, and runs the step even if the parent failed. Nothing
is written until ``txqueue.enqueue_workflow``, which writes every step or none, in the
caller's transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Generic, ParamSpec, TypeVar, cast

from ..core.fields import check_name
from ..core.ids import uuid7
from ..core.task import SUCCEEDED, Task, TaskState
from ..errors import InvalidTypeError, InvalidValueError, WorkflowError
from ..store.records import Planned, WorkflowPlan
from ..tasks.definition import TaskDefinition, TaskOptions
from .readiness import OnFailure

P = ParamSpec("P")
R = TypeVar("R")

MAX_STEPS: Final = 20_000
"""Steps in one workflow: each is a row written in the enqueue's transaction."""
MAX_EDGES: Final = 100_000
"""Edges in one workflow (a join of N parents is N edges)."""


@dataclass(frozen=True, slots=True)
class Outcome(Generic[R]):
    """How a parent ended, as a step that takes its ``outcome`` receives it: ``result``
    if it succeeded, else ``reason`` (its last error, or why it was cancelled).

    Example:

    ```python
    @registry.task()
    def summary(results: list[txqueue.Outcome[str]]) -> list[str]:
        return [o.result if o.succeeded else f"{o.state}: {o.reason}" for o in results]


    flow = txqueue.Workflow("receipts")
    sent = [flow.step(send_receipt, n) for n in (1, 2)]
    flow.step(summary, flow.outcomes(sent))  # runs whether they succeeded or not
    txqueue.enqueue_workflow(conn, flow)
    ```
    """

    state: TaskState
    result: R | None = None
    reason: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.state == SUCCEEDED


class Ref:
    """What ``Step.result``, ``Step.outcome`` and ``Workflow.results`` stand for until the
    step runs: a parent's result (or outcome), or a list of them."""

    __slots__ = ("kind", "many", "steps")

    def __init__(self, steps: tuple[Step[Any], ...], kind: str, many: bool) -> None:
        self.steps, self.kind, self.many = steps, kind, many

    def spec(self, key: dict[Step[Any], str]) -> dict[str, Any]:
        ids = [key[s] for s in self.steps]
        return {"as": self.kind, "from": ids if self.many else ids[0]}

    def __repr__(self) -> str:
        names = ", ".join(s.name for s in self.steps)
        return f"<the {self.kind} of step {names}: known when the step runs>"


class Step(Generic[R]):
    """A step of a workflow: a task, its parents and what it takes from them. ``result``
    and ``outcome`` stand for what it returns, as an argument of a later step.

    Example:

    ```python
    flow = txqueue.Workflow("order")
    paid = flow.step(charge, 42)  # a Step
    receipt = flow.step(send_receipt, 42).after(paid)  # runs once paid has succeeded
    txqueue.enqueue_workflow(conn, flow)
    ```
    """

    __slots__ = ("id", "index", "inputs", "name", "parents", "task", "workflow")

    def __init__(self, flow: Workflow, task: Task, name: str) -> None:
        self.workflow = flow
        self.task = task
        self.name = name
        self.id = uuid7()
        self.index = len(flow.steps)
        self.parents: dict[Step[Any], OnFailure] = {}
        self.inputs: dict[str, Ref] = {}

    def __repr__(self) -> str:
        return f"<Step {self.name!r} of workflow {self.workflow.name!r}>"

    @property
    def result(self) -> R:
        """This step's result, for an argument of a step declared after it: that step
        waits for this one, and does not run if it fails (it ends cancelled)."""
        return cast(R, Ref((self,), "result", many=False))

    @property
    def outcome(self) -> Outcome[R]:
        """This step's ``Outcome``, for an argument of a step declared after it: that step
        waits for this one and runs however it ended."""
        return cast(Outcome[R], Ref((self,), "outcome", many=False))

    def after(self, *parents: Step[Any], on_failure: OnFailure | str = OnFailure.CANCEL) -> Step[R]:
        """Run this step only after ``parents`` have ended; ``on_failure`` says what it does
        if one of them fails or is cancelled (``OnFailure``). Returns the step."""
        policy = _policy(on_failure)
        self.workflow._own(parents)
        for parent in parents:
            self.workflow._edge(parent, self, policy)
        return self


class Workflow:
    """A graph of steps to enqueue in one transaction (``txqueue.enqueue_workflow``):
    ``step`` adds a registered task with its arguments, ``add`` a ``Task``.

    Example:

    ```python
    flow = txqueue.Workflow("receipts")
    first = flow.step(send_receipt, 1)
    flow.step(send_receipt, 2).after(first)  # B after A
    workflow_id = txqueue.enqueue_workflow(conn, flow)  # every step, or none
    ```
    """

    def __init__(self, name: str = "workflow") -> None:
        self.name = check_name(name)
        self.id = uuid7()
        self.steps: list[Step[Any]] = []
        self._names: set[str] = set()
        self._numbers: dict[str, int] = {}  # the last number given each task's name
        self._edges = 0
        # Every edge so far goes from a step to a later one: no cycle can be closed by
        # another such edge, so only one the other way is searched for one.
        self._forward = True

    def __repr__(self) -> str:
        return f"<Workflow {self.name!r} {self.id} steps={len(self.steps)}>"

    def __iter__(self) -> Iterator[Step[Any]]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def step(
        self,
        definition: TaskDefinition[P, R] | TaskOptions[P, R],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Step[R]:
        """A step that runs ``definition`` with these arguments. An argument given a
        parent's ``result`` or ``outcome`` (or ``Workflow.results``) makes an edge from
        that parent: the step runs once it has ended, and receives what it stands for."""
        if isinstance(definition, TaskDefinition):
            definition = definition.plain
        if not isinstance(definition, TaskOptions):
            kind = type(definition).__name__
            raise InvalidTypeError("definition", f"must be a registered task, not {kind}")
        payload, refs = definition.definition.signature.split(args, kwargs, Ref)
        self._own([p for ref in refs.values() for p in ref.steps])  # before the step is added
        made = self._add(definition.task_of(payload), None)
        for arg, ref in refs.items():
            made.inputs[arg] = ref
            policy = OnFailure.RUN if ref.kind == "outcome" else OnFailure.CANCEL
            for parent in ref.steps:
                self._edge(parent, made, policy)
        return made

    def add(
        self,
        task: Task,
        *,
        after: Iterable[Step[Any]] = (),
        on_failure: OnFailure | str = OnFailure.CANCEL,
        name: str | None = None,
    ) -> Step[Any]:
        """A step that runs ``task``, after the steps ``after`` (``on_failure``: what it
        does if one of them fails or is cancelled). ``name``: its name in the workflow
        (default: the task's, numbered if taken)."""
        if not isinstance(task, Task):
            raise InvalidTypeError("task", f"must be a txqueue.Task, not {type(task).__name__}")
        parents = list(after)
        self._own(parents)
        policy = _policy(on_failure)
        made = self._add(task, name)
        return made.after(*parents, on_failure=policy)

    @staticmethod
    def results(steps: Iterable[Step[R]]) -> list[R]:
        """The results of ``steps``, in order, for an argument of a later step (a join):
        it waits for all of them, and does not run if one fails."""
        return cast(list[R], Ref(tuple(_steps(steps)), "result", many=True))

    @staticmethod
    def outcomes(steps: Iterable[Step[R]]) -> list[Outcome[R]]:
        """The ``Outcome`` of each of ``steps``, in order, for an argument of a later step:
        it runs once they have all ended, however they ended."""
        return cast(list[Outcome[R]], Ref(tuple(_steps(steps)), "outcome", many=True))

    def plan(self) -> WorkflowPlan:
        """The workflow as the store writes it; WorkflowError if it is empty."""
        if not self.steps:
            raise WorkflowError(f"{self.name!r} has no step")
        # A join's parents are named twice (its edges, its inputs): each id made text once.
        key = {s: str(s.id) for s in self.steps}
        steps = [
            Planned(
                s.id,
                s.task,
                s.name,
                {key[p]: on.value for p, on in s.parents.items()} if s.parents else {},
                {arg: ref.spec(key) for arg, ref in s.inputs.items()} if s.inputs else {},
            )
            for s in self.steps
        ]
        return WorkflowPlan(self.id, self.name, steps)

    def _add(self, task: Task, name: str | None) -> Step[Any]:
        if len(self.steps) >= MAX_STEPS:
            raise WorkflowError(f"{self.name!r}: more than {MAX_STEPS} steps")
        if task.unique_key is not None:
            raise InvalidValueError("unique_key", "a workflow's step cannot have one")
        if name is None:
            # Numbered from the last number given its task's name: a group of thousands
            # of one task is not searched for a free name step by step.
            n = self._numbers.get(task.name, 0) + 1
            name = task.name if n == 1 else f"{task.name}#{n}"
            while name in self._names:
                n += 1
                name = f"{task.name}#{n}"
            self._numbers[task.name] = n
        else:
            if name in self._names:
                raise InvalidValueError("name", f"workflow {self.name!r} has a step {name!r}")
            check_name(name)
        step: Step[Any] = Step(self, task, name)
        self._names.add(step.name)
        self.steps.append(step)
        return step

    def _own(self, steps: Iterable[Step[Any]]) -> None:
        """Refuse a step that is not one of this workflow's: an edge joins two of them."""
        for step in steps:
            if not isinstance(step, Step):
                raise InvalidTypeError("after", f"must be a Step, not {type(step).__name__}")
            if step.workflow is not self:
                raise WorkflowError(
                    f"{self.name!r}: step {step.name!r} is of another workflow: an edge joins "
                    "two steps of one workflow"
                )

    def _edge(self, parent: Step[Any], child: Step[Any], policy: OnFailure) -> None:
        """An edge between two of this workflow's steps (the caller has checked them)."""
        if child.task.run_at is not None or child.task.delay is not None:
            raise InvalidValueError("run_at", "a step with parents runs when they end")
        if not (self._forward and parent.index < child.index):
            cycle = _path(child, parent)
            if cycle is not None:
                names = " -> ".join(s.name for s in [parent, *cycle])
                raise WorkflowError(f"{self.name!r}: a cycle: {names}")
            self._forward = False
        if parent in child.parents:
            if policy != child.parents[parent] and OnFailure.RUN in (policy, child.parents[parent]):
                policy = OnFailure.RUN  # its outcome is taken: it runs however the parent ends
            else:
                return
        elif self._edges >= MAX_EDGES:
            raise WorkflowError(f"{self.name!r}: more than {MAX_EDGES} edges")
        else:
            self._edges += 1
        child.parents[parent] = policy


def _path(start: Step[Any], goal: Step[Any]) -> list[Step[Any]] | None:
    """The steps from ``start`` down to ``goal`` through the children, if ``goal`` is
    below it (an edge goal -> start would then close a cycle)."""
    if start is goal:
        return [start]
    children: dict[Step[Any], list[Step[Any]]] = {}
    for s in start.workflow.steps:
        for p in s.parents:
            children.setdefault(p, []).append(s)
    seen = {start}
    trail: dict[Step[Any], Step[Any]] = {}
    todo = [start]
    while todo:
        node = todo.pop()
        for c in children.get(node, []):
            if c in seen:
                continue
            seen.add(c)
            trail[c] = node
            if c is goal:
                path = [c]
                while path[-1] is not start:
                    path.append(trail[path[-1]])
                return path[::-1]
            todo.append(c)
    return None


def _steps(steps: Iterable[Step[Any]]) -> list[Step[Any]]:
    out = list(steps)
    for s in out:
        if not isinstance(s, Step):
            raise InvalidTypeError("steps", f"must be Steps, not {type(s).__name__}")
    if not out:
        raise InvalidValueError("steps", "is empty: a join needs at least one parent")
    return out


def _policy(value: object) -> OnFailure:
    try:
        return OnFailure(str(value))
    except ValueError:
        choices = ", ".join(OnFailure)
        raise InvalidValueError("on_failure", f"must be one of {choices}, not {value!r}") from None
