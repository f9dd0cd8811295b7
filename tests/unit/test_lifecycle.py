"""The lifecycle's decisions, case by case, and the transitions that carry them."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from txqueue.core import failures, lifecycle
from txqueue.core.lifecycle import ABANDON, COMPENSATE, POLICIES, RETRY, Fence, Move, Transition
from txqueue.core.stored import Event
from txqueue.core.task import CANCELLED, FAILED, PENDING, RUNNING, SUCCEEDED, TaskState
from txqueue.store.sql import Queries

AT = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("state", "cancel_requested", "after"),
    [
        (SUCCEEDED, False, SUCCEEDED),
        (SUCCEEDED, True, SUCCEEDED),  # it finished: the request came too late
        (FAILED, False, FAILED),
        (FAILED, True, FAILED),
        (CANCELLED, False, CANCELLED),  # the handler raised TaskCancelled
        (PENDING, False, PENDING),  # a retry
        (PENDING, True, CANCELLED),  # a retry of a task someone asked to cancel
    ],
)
def test_an_outcome_writes_its_state_but_a_cancelled_retry_ends(
    state: str, cancel_requested: bool, after: str
) -> None:
    assert lifecycle.after_outcome(state, cancel_requested) == after


@pytest.mark.parametrize(
    ("policy", "cancel_requested", "after"),
    [
        (RETRY, False, PENDING),
        (ABANDON, False, RUNNING),  # lease ended now: the cleaner applies the policy
        (COMPENSATE, False, RUNNING),
        (RETRY, True, CANCELLED),
        (ABANDON, True, CANCELLED),
        (COMPENSATE, True, CANCELLED),
    ],
)
def test_a_release_retries_only_under_the_retry_policy(
    policy: str, cancel_requested: bool, after: str
) -> None:
    assert lifecycle.after_release(policy, cancel_requested) == after


def test_a_task_given_back_is_pending_again_unless_cancelled() -> None:
    assert lifecycle.after_give_back(False) == PENDING
    assert lifecycle.after_give_back(True) == CANCELLED


@pytest.mark.parametrize(
    ("policy", "attempts", "max_attempts", "cancel_requested", "after"),
    [
        (RETRY, 1, 3, False, PENDING),
        (RETRY, 2, 3, False, PENDING),
        (RETRY, 3, 3, False, FAILED),  # the lost attempt was the last
        (RETRY, 4, 3, False, FAILED),  # max_attempts lowered since
        (ABANDON, 1, 3, False, FAILED),
        (COMPENSATE, 1, 3, False, FAILED),
        (RETRY, 1, 3, True, CANCELLED),
        (ABANDON, 3, 3, True, CANCELLED),
    ],
)
def test_an_expired_lease_retries_abandons_or_cancels(
    policy: str, attempts: int, max_attempts: int, cancel_requested: bool, after: str
) -> None:
    assert lifecycle.after_lease_expired(policy, attempts, max_attempts, cancel_requested) == after


@pytest.mark.parametrize(
    ("attempts", "max_attempts", "final", "after"),
    [
        (1, 3, False, PENDING),
        (2, 3, False, PENDING),
        (3, 3, False, FAILED),
        (4, 3, False, FAILED),
        (1, 3, True, FAILED),
    ],
)
def test_a_failed_attempt_runs_again_while_attempts_are_left_unless_its_error_is_final(
    attempts: int, max_attempts: int, final: bool, after: str
) -> None:
    assert lifecycle.after_failure(attempts, max_attempts, final) == after


def test_a_task_without_a_policy_copied_at_its_claim_is_retried() -> None:
    assert lifecycle.policy_of(None) == RETRY
    assert lifecycle.policy_of({}) == RETRY
    assert lifecycle.policy_of({"policy": ABANDON}) == ABANDON
    assert lifecycle.policy_of({"policy": COMPENSATE, "name": "undo", "queue": "q"}) == COMPENSATE


def test_the_compensation_task_carries_the_lost_task() -> None:
    spec = {"policy": COMPENSATE, "name": "refund", "queue": "money"}
    task = lifecycle.compensation(spec, "0190-id", "charge", {"order": 7})
    assert (task.name, task.queue) == ("refund", "money")
    assert task.payload == {"task_id": "0190-id", "name": "charge", "payload": {"order": 7}}


def test_error_entries_have_one_shape() -> None:
    stopped = failures.worker_stopped(2, "w1", AT).as_json()
    expired = failures.lease_expired(3, "w2", AT).as_json()
    failed = failures.failure("w3", 1, ValueError, "bad", "Traceback…", at=AT).as_json()
    assert stopped == {
        "at": AT.isoformat(),
        "attempt": 2,
        "worker_id": "w1",
        "type": "txqueue.WorkerStopped",
        "message": "the worker stopped before the task finished; released",
        "traceback": None,
    }
    assert expired["type"] == "txqueue.LeaseExpired"
    assert expired["message"] == "lease expired, worker lost: w2 stopped heartbeating"
    assert failed["type"] == "builtins.ValueError"
    assert failed["traceback"] == "Traceback…"
    assert stopped.keys() == expired.keys() == failed.keys()


def _running(**changes: object) -> lifecycle.Running:
    fields = {
        "id": uuid.uuid4(),
        "queue": "q",
        "name": "charge",
        "payload": {"order": 7},
        "attempt": 2,
        "max_attempts": 3,
        "worker_id": "w1",
        "on_lease_expired": None,
        "cancel_requested": False,
        "now": AT,
        **changes,
    }
    return lifecycle.Running(**fields)  # type: ignore[arg-type]


def test_an_outcome_is_fenced_on_its_attempt_and_worker() -> None:
    task_id = uuid.uuid4()
    t = lifecycle.ended(task_id, 2, "w1", PENDING, error={"type": "E", "message": "m"}, retry_in=4)
    assert (t.move, t.to, t.if_cancel_requested, t.run_in) == (Move.RETRIED, PENDING, CANCELLED, 4)
    assert t.fence == Fence(RUNNING, 2, "w1")
    assert t.reason() == "E: m"
    assert lifecycle.ended(task_id, 2, "w1", SUCCEEDED, '{"ok": 1}').move == Move.SUCCEEDED


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("cancel_requested", [False, True])
def test_a_release_writes_what_after_release_decides(policy: str, cancel_requested: bool) -> None:
    task = _running(on_lease_expired={"policy": policy}, cancel_requested=cancel_requested)
    t = lifecycle.released(task, "w1")
    assert t.to == lifecycle.after_release(policy, cancel_requested)
    # Left running for the cleaner: its lease ends now, and the cleaner writes the error.
    assert t.lease_ends is (t.to == RUNNING)
    assert (t.error is None) is (t.to == RUNNING)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("attempt", [1, 3])
@pytest.mark.parametrize("cancel_requested", [False, True])
def test_a_recovery_writes_what_after_lease_expired_decides(
    policy: str, attempt: int, cancel_requested: bool
) -> None:
    spec = {"policy": policy, "name": "refund", "queue": "money"}
    task = _running(on_lease_expired=spec, attempt=attempt, cancel_requested=cancel_requested)
    t = lifecycle.recovered(task)
    assert t.to == lifecycle.after_lease_expired(policy, attempt, 3, cancel_requested)
    assert t.fence == Fence(RUNNING, attempt, "w1") and t.by == lifecycle.CLEANER
    assert t.error is not None and t.error["type"] == failures.LEASE_EXPIRED
    assert [c.name for c in t.enqueues] == (
        ["refund"] if lifecycle.compensates(policy, t.to) else []
    )


def test_a_cancel_by_hand_ends_a_pending_task_and_flags_a_running_one() -> None:
    task_id = uuid.uuid4()
    pending = lifecycle.cancelled(task_id, PENDING, "ops")
    running = lifecycle.cancelled(task_id, RUNNING, "ops")
    assert pending is not None and (pending.to, pending.requests_cancel) == (CANCELLED, False)
    assert running is not None and (running.to, running.requests_cancel) == (RUNNING, True)
    assert lifecycle.cancelled(task_id, SUCCEEDED, "ops") is None


def test_a_give_back_undoes_the_claim_and_keeps_run_at() -> None:
    t = lifecycle.given_back(uuid.uuid4(), 1, "w1")
    assert (t.to, t.if_cancel_requested, t.undoes_claim, t.run_in) == (
        PENDING,
        CANCELLED,
        True,
        None,
    )


def test_no_transition_can_break_the_table_of_moves() -> None:
    with pytest.raises(ValueError, match="no move"):
        Transition(uuid.uuid4(), Move.RETRY, Fence(SUCCEEDED), PENDING, "ops")
    with pytest.raises(ValueError, match="no move"):
        Transition(uuid.uuid4(), Move.CANCEL, Fence(FAILED), CANCELLED, "ops")
    assert set(lifecycle.MOVES) == set(TaskState)
    assert all(s in lifecycle.MOVES for targets in lifecycle.MOVES.values() for s in targets)


def test_the_documented_table_of_moves_is_the_one_transitions_are_checked_against() -> None:
    page = (Path(__file__).parents[2] / "docs/explanation/lifecycle.md").read_text()
    table = page.split("<!-- moves -->")[1].split("<!-- /moves -->")[0]
    documented = {}
    for line in table.strip().splitlines()[2:]:
        state, targets = (cell.strip() for cell in line.strip("|").split("|"))
        documented[state] = {t.strip() for t in targets.split(",") if t.strip()}
    assert documented == {str(k): {str(t) for t in v} for k, v in lifecycle.MOVES.items()}
    names = {m.strip("`") for m in re.findall(r"^\| (`[a-z ]+`) \|", page, re.MULTILINE)}
    assert names == {str(m) for m in Move}


# An assignment to ``state`` in an UPDATE's SET list.
_WRITES_STATE = re.compile(
    r"\bSET\s+state\s*=|\bSET\b(?:(?!\bWHERE\b|\bFROM\b|\bRETURNING\b).)*?,\s*state\s*=",
    re.S | re.I,
)


@pytest.mark.parametrize("package", ["txqueue.store.postgres", "txqueue.store.sqlite"])
def test_no_statement_but_apply_and_the_claims_changes_a_tasks_state(package: str) -> None:
    """Every move is applied by ``apply`` (the claim, pending to running, by the claims);
    the inserts write a task's first state."""
    queries = Queries(package)
    writers = {name for name in queries.names() if _WRITES_STATE.search(queries[name])}
    assert "apply" in writers
    assert {name for name in writers if name != "apply" and not name.startswith("claim")} == set()


ILLEGAL = [(f, to) for f in TaskState for to in TaskState if to not in lifecycle.MOVES[f]]


@pytest.mark.parametrize(("fence", "to"), ILLEGAL)
def test_a_transition_off_the_table_of_moves_cannot_be_built(
    fence: TaskState, to: TaskState
) -> None:
    with pytest.raises(ValueError, match=f"no move from {fence} to {to}"):
        Transition(uuid.uuid4(), Move.RETRY, Fence(fence), to, "ops")
    # The state written if a cancel was requested is a move too.
    legal = sorted(lifecycle.MOVES[fence])
    if legal:
        with pytest.raises(ValueError, match=f"no move from {fence} to {to}"):
            Transition(
                uuid.uuid4(), Move.RETRY, Fence(fence), legal[0], "ops", if_cancel_requested=to
            )


@pytest.mark.parametrize("schema", ["schema.sql", "schema.sqlite.sql"])
def test_the_schema_allows_exactly_the_states_of_the_enum(schema: str) -> None:
    text = (Path(__file__).parents[2] / schema).read_text()
    # The last migration's check is the one in force; the earlier ones are history.
    declared = re.findall(r"CHECK\s*\(state IN \(([^)]*)\)\)", text)
    assert declared, schema
    assert {s.strip().strip("'") for s in declared[-1].split(",")} == {str(s) for s in TaskState}


def test_an_event_reads_back_as_the_stores_keep_it() -> None:
    entry = {"at": AT.isoformat(), "attempt": 1, "move": "claimed", "from": "pending"}
    event = Event.of_json({**entry, "to": "running", "by": "w1"})
    assert (event.from_state, event.to_state, event.by, event.reason) == (
        PENDING,
        RUNNING,
        "w1",
        None,
    )
    assert Event.of_json(event.as_json()) == event
