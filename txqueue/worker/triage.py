"""What to do with a wake-up the claim did not get: a pure function of what the store saw.

The claim protocol of DESIGN.md, step 3, as one decision per wake-up. No threads, no
database: ``tests/unit/test_triage.py`` walks every case.
"""

from __future__ import annotations

import enum
from collections.abc import Container

from ..core.task import PENDING
from ..store.records import Why


class Verdict(enum.Enum):
    WAIT = "wait"  # not visible yet, or its transaction still open: ask again shortly
    PASS_ON = "passed_on"  # committed, pending and ripe, but no thread is free: the poll's
    NO_HANDLER = "no_handler"  # pending, ripe, but this worker has no handler for its name
    HELD = "held"  # pending and ripe, in a queue paused, limited or fair: its poll decides
    ROLLED_BACK = "dropped_rolled_back"  # its transaction aborted: it never existed
    GONE = "dropped_gone"  # its transaction committed but the row is gone (pruned, deleted)
    NOT_RIPE = "dropped_not_ripe"  # pending with a later run_at: the poll takes it then
    NOT_PENDING = "dropped_not_pending"  # claimed by someone else, or finished

    @property
    def acked(self) -> bool:
        """Decided for good: the delivery can be acknowledged."""
        return self is not Verdict.WAIT


def triage(
    why: Why, *, has_xid: bool, passed_on: bool, known: Container[str], keyed: bool = False
) -> Verdict:
    """Decide a wake-up from ``why`` (its transaction's status, read first, then its row).

    ``has_xid``: the message named its transaction (not on SQLite, nor in very old
    messages). ``passed_on``: the worker had no free thread to claim it with. ``known``:
    the task names this worker has handlers for. ``keyed``: some of them have limits of
    their own, which may have held the task back.
    """
    if why.xact_status == "in progress":
        # Whatever row is visible predates that transaction (say, the failed task it is
        # retrying): only its end tells.
        return Verdict.WAIT
    if why.state is None:
        if why.xact_status == "aborted":
            return Verdict.ROLLED_BACK
        if why.xact_status == "committed" or has_xid:
            # Committed (or so old that PostgreSQL no longer knows), yet no row.
            return Verdict.GONE
        return Verdict.WAIT  # no transaction to ask about: the row may still come
    if why.state != PENDING:
        return Verdict.NOT_PENDING
    if not why.ripe:
        return Verdict.NOT_RIPE
    if why.name not in known:
        return Verdict.NO_HANDLER
    if why.held or keyed:
        # The claim by id found no room in its queue, or for its key (or lost the row to
        # another claim): the queue's poll takes it when the limits allow, and says when.
        return Verdict.HELD
    # Committed and claimable: the claim missed it because it committed just after, or
    # another transaction held its row locked. Ask again, unless no thread is free.
    return Verdict.PASS_ON if passed_on else Verdict.WAIT
