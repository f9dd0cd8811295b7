"""The claim protocol's decision for a wake-up the claim missed, case by case (DESIGN.md,
"The claim protocol", step 3)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from txqueue.store.records import Why
from txqueue.worker.triage import Verdict, triage

LATER = datetime.now(UTC) + timedelta(hours=1)
KNOWN = {"send"}


def why(
    status: str | None,
    state: str | None,
    *,
    ripe: bool = True,
    name: str = "send",
    held: bool = False,
) -> Why:
    return Why(status, state, LATER if not ripe else None, ripe, name if state else None, held)


@pytest.mark.parametrize(
    ("seen", "has_xid", "passed_on", "verdict"),
    [
        # row present, not pending (claimed by another worker, or finished): drop
        (why("committed", "running"), True, False, Verdict.NOT_PENDING),
        (why("committed", "succeeded"), True, True, Verdict.NOT_PENDING),
        (why(None, "failed"), False, False, Verdict.NOT_PENDING),
        # row present, pending, not ripe: drop, the poll takes it when ripe
        (why("committed", "pending", ripe=False), True, False, Verdict.NOT_RIPE),
        (why(None, "pending", ripe=False), False, True, Verdict.NOT_RIPE),
        # row absent, transaction aborted: never run
        (why("aborted", None), True, False, Verdict.ROLLED_BACK),
        (why("aborted", None), True, True, Verdict.ROLLED_BACK),
        # row absent, transaction committed: gone (pruned, cancelled and deleted)
        (why("committed", None), True, False, Verdict.GONE),
        # row absent, status unknown although the message named it (too old): gone
        (why(None, None), True, False, Verdict.GONE),
        # row absent, transaction in progress: wait for the commit
        (why("in progress", None), True, False, Verdict.WAIT),
        (why("in progress", None), True, True, Verdict.WAIT),
        # no xid in the message (SQLite, old producers): the same wait, without the shortcut
        (why(None, None), False, False, Verdict.WAIT),
        (why(None, None), False, True, Verdict.WAIT),
        # an older version of the row is visible while the transaction is still open (a
        # retry of a failed task): wait for that transaction, whatever the row says
        (why("in progress", "failed"), True, False, Verdict.WAIT),
        (why("in progress", "pending", ripe=False), True, True, Verdict.WAIT),
        (why("in progress", "pending"), True, True, Verdict.WAIT),
        # committed, pending and ripe, yet not claimed: committed just after the claim, or
        # its row locked by someone: ask again; with no free thread, the poll's
        (why("committed", "pending"), True, False, Verdict.WAIT),
        (why(None, "pending"), False, False, Verdict.WAIT),
        (why("committed", "pending"), True, True, Verdict.PASS_ON),
        # a name this worker has no handler for: left pending for a worker that has one
        (why("committed", "pending", name="other"), True, False, Verdict.NO_HANDLER),
        (why("committed", "pending", name="other"), True, True, Verdict.NO_HANDLER),
        (why("committed", "pending", ripe=False, name="other"), True, False, Verdict.NOT_RIPE),
        # in a queue paused or limited, pending and ripe: its poll starts it when it may,
        # with or without a free thread now
        (why("committed", "pending", held=True), True, False, Verdict.HELD),
        (why(None, "pending", held=True), False, False, Verdict.HELD),
        (why("committed", "pending", held=True), True, True, Verdict.HELD),
        # a commit not seen yet, or not ripe, or no handler, decides first
        (why("in progress", "pending", held=True), True, False, Verdict.WAIT),
        (why("committed", "pending", ripe=False, held=True), True, False, Verdict.NOT_RIPE),
        (why("committed", "pending", name="other", held=True), True, False, Verdict.NO_HANDLER),
    ],
)
def test_triage(seen: Why, has_xid: bool, passed_on: bool, verdict: Verdict) -> None:
    assert triage(seen, has_xid=has_xid, passed_on=passed_on, known=KNOWN) is verdict
    assert verdict.acked is (verdict is not Verdict.WAIT)


def test_a_worker_whose_tasks_have_keys_leaves_a_missed_ripe_task_to_its_poll() -> None:
    """A key may have held it back: asking again by id would only meet the key again."""
    seen = why("committed", "pending")
    assert triage(seen, has_xid=True, passed_on=False, known=KNOWN, keyed=True) is Verdict.HELD
    waiting = why("in progress", "pending")
    assert triage(waiting, has_xid=True, passed_on=False, known=KNOWN, keyed=True) is Verdict.WAIT
