"""Flow control in each store: a queue's settings, and the claims that obey them: paused,
rate-limited and concurrency-limited queues, exact because the claim itself counts."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest

from ....store.records import ClaimDefaults, Poll
from ....store.settings import QueueChange, QueueSettings
from ..case import WORKER, StoreCase, defaults, finish, select


def change(s: StoreCase, queue: str, **settings: object) -> QueueSettings:
    """What txqueue.limit_queue and pause_queue do, committed."""
    changing = {"rate" if k.startswith("rate") else k for k in settings}
    with contextlib.closing(s.connect()) as c:
        new = s.store.change_queue(c, queue, QueueChange(frozenset(changing), **settings))  # type: ignore[arg-type]
        c.commit()
    return new


def poll(s: StoreCase, limit: int = 10, queue: str = "q") -> list[uuid.UUID]:
    return [
        c.id for c in s.store.claim_ripe(s.conn, Poll(queue, limit, WORKER, defaults())).claimed
    ]


def running_in(s: StoreCase, queue: str = "q") -> int:
    return len(s.rows("state = 'running' AND queue = %s", (queue,)))


def test_settings_are_saved_and_read_back_and_a_free_queue_is_not_listed(s: StoreCase) -> None:
    assert s.store.queue_settings(s.conn) == []
    change(s, "b", rate_limit=50, rate_period=1.0, concurrency=5)
    change(s, "a", paused=True)
    assert s.store.queue_settings(s.conn) == [
        QueueSettings("a", paused=True),
        QueueSettings("b", rate_limit=50, rate_period=1.0, concurrency=5),
    ]
    change(s, "a", paused=False)
    change(s, "b", rate_limit=None, rate_period=None, concurrency=None)
    assert s.store.queue_settings(s.conn) == []  # their rows stay, read as free


def test_a_paused_queue_starts_nothing_and_says_why(s: StoreCase) -> None:
    first = s.enqueue()
    change(s, "q", paused=True)
    second = s.enqueue()  # enqueues go on
    elsewhere = s.enqueue(queue="other")

    polled = s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, defaults()))
    assert (polled.claimed, polled.held) == ([], "paused")
    assert s.claim(first, second) == []
    why = s.store.why_unclaimed(s.conn, [(first, None)])[first]
    assert (why.state, why.ripe, why.held) == ("pending", True, True)
    assert [c.id for c in s.claim(elsewhere)] == [elsewhere]
    assert [r["attempts"] for r in s.rows("queue = 'q'")] == [0, 0]  # no attempt spent

    change(s, "q", paused=False)
    assert poll(s) == [first, second]


def test_the_ripe_tasks_of_a_queue_come_best_first(s: StoreCase) -> None:
    low = s.enqueue(priority=0)
    high = s.enqueue(priority=3)
    s.enqueue(priority=9, delay=60)
    s.enqueue(priority=9, queue="other")
    assert [(m.id, m.queue, m.xid) for m in s.store.ripe_tasks(s.conn, "q", 10)] == [
        (high, "q", None),
        (low, "q", None),
    ]
    assert [m.id for m in s.store.ripe_tasks(s.conn, "q", 1)] == [high]


def test_a_concurrency_limit_counts_the_running_tasks_of_every_worker(s: StoreCase) -> None:
    change(s, "q", concurrency=3)
    ids = [s.enqueue(priority=10 - i) for i in range(6)]
    other = s.store.claim_ids(s.conn, [ids[0]], "host:2:w1", defaults())
    assert [c.id for c in other] == [ids[0]]

    polled = s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, defaults()))
    assert [c.id for c in polled.claimed] == ids[1:3]
    assert polled.held == "concurrency"
    assert poll(s) == []
    assert s.claim(*ids[3:]) == []  # by id too
    assert s.store.why_unclaimed(s.conn, [(ids[3], None)])[ids[3]].held

    finish(s, polled.claimed[0], "succeeded")
    assert poll(s) == [ids[3]]
    assert running_in(s) == 3


def test_a_claim_by_id_takes_the_best_of_its_ids_the_limit_leaves_room_for(s: StoreCase) -> None:
    change(s, "q", concurrency=2)
    low, mid, high = (s.enqueue(priority=p) for p in (1, 2, 3))
    free = s.enqueue(queue="other")
    assert {c.id for c in s.claim(low, mid, high, free)} == {high, mid, free}


def test_a_rate_limit_paces_starts_and_counts_them_over_a_sliding_window(s: StoreCase) -> None:
    change(s, "q", rate_limit=3, rate_period=9.0)  # a start every 3 s, 3 in any 9 s
    ids = [s.enqueue() for _ in range(8)]

    polled = s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, defaults()))
    assert [c.id for c in polled.claimed] == ids[:1]
    assert (polled.held, polled.retry_in) == ("rate", pytest.approx(3.0, abs=0.5))  # type: ignore[comparison-overlap]
    assert poll(s) == []
    assert s.claim(ids[1]) == []  # by id too
    s.advance(3.1)
    assert poll(s) == ids[1:2]
    s.advance(3.1)
    assert poll(s) == ids[2:3]
    s.advance(2)  # paced, but the window of 9 s holds three starts
    polled = s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, defaults()))
    assert (polled.claimed, polled.held) == ([], "rate")
    assert polled.retry_in == pytest.approx(0.8, abs=0.5)  # when the first start leaves
    s.advance(1)
    assert poll(s) == ids[3:4]


def test_a_high_rate_starts_a_few_at_once(s: StoreCase) -> None:
    change(s, "q", rate_limit=2000, rate_period=1.0)  # 20 in each 10 ms
    for _ in range(30):
        s.enqueue()
    polled = s.store.claim_ripe(s.conn, Poll("q", 30, WORKER, defaults()))
    assert (len(polled.claimed), polled.held) == (20, "rate")
    assert polled.retry_in == pytest.approx(0.01, abs=0.005)


def test_finished_tasks_still_count_against_the_rate(s: StoreCase) -> None:
    change(s, "q", rate_limit=2, rate_period=60.0)
    ids = [s.enqueue() for _ in range(3)]
    for task in s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, defaults())).claimed:
        finish(s, task, "succeeded")
    s.advance(31)
    assert poll(s) == ids[1:2]
    s.advance(20)
    assert poll(s) == []
    s.advance(10)
    assert poll(s) == ids[2:]


def test_both_limits_hold_at_once(s: StoreCase) -> None:
    change(s, "q", rate_limit=2, rate_period=60.0, concurrency=1)
    ids = [s.enqueue() for _ in range(3)]
    (first,) = s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, defaults())).claimed
    s.advance(31)
    polled = s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, defaults()))
    assert (polled.claimed, polled.held) == ([], "concurrency")
    finish(s, first, "succeeded")
    (second,) = s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, defaults())).claimed
    assert second.id == ids[1]
    finish(s, second, "succeeded")
    polled = s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, defaults()))
    assert (polled.claimed, polled.held) == ([], "rate")


def test_a_recovered_lease_frees_its_concurrency_slot_and_not_before(s: StoreCase) -> None:
    change(s, "q", concurrency=1)
    first, second = s.enqueue(timeout=5.0), s.enqueue()
    assert poll(s) == [first]
    s.advance(4)
    assert s.store.recover_expired(s.conn, 10, 3) == []
    assert poll(s) == []  # the lease still holds the slot
    s.advance(2)
    assert [r.id for r in s.store.recover_expired(s.conn, 10, 3)] == [first]
    assert poll(s) == [second]


def test_starts_no_window_holds_are_pruned(s: StoreCase) -> None:
    change(s, "q", rate_limit=5000, rate_period=10.0)
    change(s, "r", rate_limit=50000, rate_period=100.0)
    for queue in ("q", "r"):
        s.enqueue(queue=queue)
        s.enqueue(queue=queue)
        assert len(poll(s, queue=queue)) == 2
    assert s.store.prune_starts(s.conn) == 0
    s.advance(50)
    assert s.store.prune_starts(s.conn) == 1  # q's claim of two
    s.advance(51)
    assert s.store.prune_starts(s.conn) == 1  # r's
    assert select(s, "SELECT count(*) FROM txqueue_starts") == [(0,)]


# --- task keys ----------------------------------------------------------------------------


def keyed(
    concurrency: dict[str, Any] | None = None, rate: dict[str, Any] | None = None
) -> ClaimDefaults:
    """A worker whose task "t" has limits of its own, as Registry.claim_defaults gives them."""
    mine: dict[str, Any] = {}
    if concurrency is not None:
        mine["concurrency"] = {"arg": None, "default": None, **concurrency}
    if rate is not None:
        mine["rate"] = {"arg": None, "default": None, **rate}
    return defaults(per_name={"t": mine})


def test_a_concurrency_key_holds_each_value_to_its_limit_across_workers(s: StoreCase) -> None:
    with_ = keyed(concurrency={"arg": "account", "limit": 1})
    a1, a2 = s.enqueue(payload={"account": 1}, priority=9), s.enqueue(payload={"account": 1})
    b1 = s.enqueue(payload={"account": "b"})
    none = s.enqueue(payload={}, priority=-1)  # the argument left out: its default's key

    polled = s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, with_))
    assert [c.id for c in polled.claimed] == [a1, b1, none]
    assert polled.held == "key"
    assert {r["id"]: r["concurrency_key"] for r in s.rows("state = 'running'")} == {
        a1: "account:1",
        b1: "account:b",
        none: "account:",
    }
    assert s.store.claim_ids(s.conn, [a2], "host:2:w1", with_) == []  # another worker
    finish(s, polled.claimed[0], "succeeded")
    assert [c.id for c in s.store.claim_ids(s.conn, [a2], "host:2:w1", with_)] == [a2]


def test_a_key_without_an_argument_limits_the_task_as_a_whole(s: StoreCase) -> None:
    with_ = keyed(concurrency={"limit": 2})
    ids = [s.enqueue(payload={"n": i}) for i in range(4)]
    assert [c.id for c in s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, with_)).claimed] == ids[
        :2
    ]
    assert s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, with_)).claimed == []


def test_a_poll_told_to_look_ahead_finds_tasks_past_a_key_at_its_limit(s: StoreCase) -> None:
    with_ = keyed(concurrency={"arg": "tenant", "limit": 1})
    big = [s.enqueue(payload={"tenant": "big"}, priority=5) for _ in range(6)]
    small = s.enqueue(payload={"tenant": "small"})
    assert [c.id for c in s.store.claim_ripe(s.conn, Poll("q", 2, WORKER, with_)).claimed] == [
        big[0]
    ]  # and the rest of the room goes to none: the candidates were big's
    polled = s.store.claim_ripe(s.conn, Poll("q", 2, WORKER, with_), lookahead=6)
    assert ([c.id for c in polled.claimed], polled.held) == ([small], "key")


def test_a_rate_key_paces_each_value_on_its_own(s: StoreCase) -> None:
    with_ = keyed(rate={"arg": "token", "limit": 2, "period": 10.0})
    x = [s.enqueue(payload={"token": "x"}) for _ in range(3)]
    y = [s.enqueue(payload={"token": "y"}) for _ in range(3)]
    polled = s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, with_))
    assert [c.id for c in polled.claimed] == [x[0], y[0]]
    assert (polled.held, polled.retry_in) == ("key", pytest.approx(5.0, abs=0.5))  # type: ignore[comparison-overlap]
    s.advance(5.1)
    assert poll_with(s, with_) == [x[1], y[1]]
    s.advance(5.1)  # the first starts left the window
    assert poll_with(s, with_) == [x[2], y[2]]


def test_a_queue_limit_and_a_key_hold_together(s: StoreCase) -> None:
    change(s, "q", concurrency=2)
    with_ = keyed(concurrency={"arg": "k", "limit": 1})
    a = [s.enqueue(payload={"k": "a"}, priority=3) for _ in range(2)]
    b = [s.enqueue(payload={"k": "b"}, priority=2) for _ in range(2)]
    c = s.enqueue(payload={"k": "c"}, priority=1)
    assert poll_with(s, with_) == [a[0], b[0]]
    assert poll_with(s, with_) == []
    assert s.claim(c, with_=with_) == []  # the queue is full


def poll_with(s: StoreCase, with_: ClaimDefaults) -> list[uuid.UUID]:
    """A poll of a worker that met keys at their limit: it looks past them."""
    polled = s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, with_), lookahead=30)
    return [c.id for c in polled.claimed]


# --- fair share --------------------------------------------------------------------------


def fair_poll(
    s: StoreCase, limit: int, after: str = "", with_: ClaimDefaults | None = None
) -> tuple[list[str], str]:
    """A fair poll: the keys of the tasks it claimed (sorted: they start together), and
    where the next poll goes on."""
    polled = s.store.claim_fair(s.conn, Poll("q", limit, WORKER, with_ or defaults()), after)
    assert polled.held is None
    keys = {r["id"]: r["concurrency_key"] for r in s.rows("queue = 'q'")}
    return sorted(keys[c.id] or "-" for c in polled.claimed), polled.after


def test_a_fair_share_queue_is_claimed_only_by_the_fair_poll_and_says_so(s: StoreCase) -> None:
    task = s.enqueue(concurrency_key="tenant:a")
    assert s.store.claim_fair(s.conn, Poll("q", 10, WORKER, defaults())).held == "plain"
    change(s, "q", fair_share=True)
    assert s.store.queue_settings(s.conn) == [QueueSettings("q", fair_share=True)]
    polled = s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, defaults()))
    assert (polled.claimed, polled.held) == ([], "fair")
    assert s.claim(task) == []  # a wake-up: its worker polls instead
    assert s.store.why_unclaimed(s.conn, [(task, None)])[task].held
    assert fair_poll(s, 10) == (["tenant:a"], "")


def test_the_keys_of_a_fair_share_queue_take_turns(s: StoreCase) -> None:
    change(s, "q", fair_share=True)
    for i in range(20):
        s.enqueue(payload={"i": i}, concurrency_key="tenant:big", priority=5)
    for i in range(3):
        s.enqueue(payload={"i": i}, concurrency_key="tenant:small")
    s.enqueue(payload={"i": 0}, priority=9)  # no key

    # One of each key in turn; the queue's own order (best priority first: the task
    # without a key) has a turn as the round ends.
    assert fair_poll(s, 6) == (["-"] + ["tenant:big"] * 3 + ["tenant:small"] * 2, "")
    # The small key's last task, then the big key's backlog fills the room left.
    assert fair_poll(s, 4) == (["tenant:big"] * 3 + ["tenant:small"], "")
    assert fair_poll(s, 4) == (["tenant:big"] * 4, "")


def test_a_fair_poll_goes_on_where_the_last_one_stopped(s: StoreCase) -> None:
    change(s, "q", fair_share=True)
    for key in "abcde":
        for _ in range(2):
            s.enqueue(concurrency_key=f"k:{key}")
    assert fair_poll(s, 2) == (["k:a", "k:b"], "k:b")
    assert fair_poll(s, 2, "k:b") == (["k:c", "k:d"], "k:d")
    assert fair_poll(s, 2, "k:d") == (["k:a", "k:e"], "")  # the round ends: the queue's turn
    assert fair_poll(s, 3) == (["k:b", "k:c", "k:d"], "k:d")  # k:a has none left


def test_a_limited_fair_queue_still_rotates_its_keys(s: StoreCase) -> None:
    change(s, "q", fair_share=True, concurrency=1)
    for key in "abc" * 3:
        s.enqueue(concurrency_key=f"k:{key}")
    served, after = [], ""
    for _ in range(6):
        # A worker with 4 free threads: the queue's room (1), not its threads, sizes the
        # round; a poll that finds no room leaves the round where it was.
        polled = s.store.claim_fair(s.conn, Poll("q", 4, WORKER, defaults()), after)
        assert len(polled.claimed) == 1, polled
        after = polled.after
        idle = s.store.claim_fair(s.conn, Poll("q", 4, WORKER, defaults()), after)
        assert (idle.claimed, idle.held, idle.after) == ([], "concurrency", after)
        served.append(s.row(polled.claimed[0].id)["concurrency_key"])
        finish(s, polled.claimed[0], "succeeded")
    # Each key in turn; the round's end is the queue's turn, its own order's first task
    # (here the oldest, k:a's), then the next round.
    assert served == ["k:a", "k:b", "k:c", "k:a", "k:a", "k:b"]


def test_a_fair_poll_obeys_the_queue_limits_and_the_keys(s: StoreCase) -> None:
    change(s, "q", fair_share=True, concurrency=3)
    with_ = keyed(concurrency={"arg": "tenant", "limit": 1})
    for tenant in ("a", "a", "b", "b", "c", "d"):
        s.enqueue(payload={"tenant": tenant}, concurrency_key=f"tenant:{tenant}")
    polled = s.store.claim_fair(s.conn, Poll("q", 10, WORKER, with_))
    assert sorted(c.payload["tenant"] for c in polled.claimed) == ["a", "b", "c"]
    assert polled.held == "concurrency"
    change(s, "q", paused=True)
    assert s.store.claim_fair(s.conn, Poll("q", 10, WORKER, with_)).held == "paused"
