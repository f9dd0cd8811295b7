"""worker_seen, worker_gone, workers, unhandled and handled: the workers alive now, as their
rows in txqueue_workers say, the task names they handle, and the pending tasks none of them
has a handler for."""

from __future__ import annotations

from datetime import timedelta

from ....store.records import WORKER_ALIVE_WITHIN, WORKER_FORGOTTEN_AFTER, Outcome
from ....store.reports import WorkerRow
from ..case import WORKER, StoreCase, defaults, near, select

# On PostgreSQL a new row's started_at and seen_at are the columns' defaults, which call
# pg_catalog.now() and so miss the test's moved clock: every worker is first seen before
# the clock moves.


def kept(s: StoreCase) -> list[str]:
    """Every worker row, alive or not: ``workers`` shows only the live ones."""
    return [r[0] for r in select(s, "SELECT worker_id FROM txqueue_workers ORDER BY worker_id")]


def test_a_worker_seen_is_listed_with_its_queues_since_now(s: StoreCase) -> None:
    s.store.worker_seen(s.conn, "w1", ["q", "r"], ["t", "u"])
    (row,) = s.store.workers(s.conn)
    assert (row.worker_id, row.queues) == ("w1", ["q", "r"])
    assert row.started_at == row.seen_at
    assert near(row.seen_at, s.now())


def test_seen_again_a_worker_keeps_its_start_and_takes_the_new_queues_and_names(
    s: StoreCase,
) -> None:
    s.enqueue("t")
    s.store.worker_seen(s.conn, "w1", ["q"], ["t"])
    (first,) = s.store.workers(s.conn)
    s.advance(10)
    s.store.worker_seen(s.conn, "w1", ["other"], ["u"])
    (again,) = s.store.workers(s.conn)
    assert again.queues == ["other"]
    assert again.started_at == first.started_at
    assert near(again.seen_at, first.seen_at + timedelta(seconds=10))
    assert s.store.unhandled(s.conn) == (1, [("q", "t", 1)])  # names replaced too


def test_workers_lists_those_seen_within_the_alive_window_by_id(s: StoreCase) -> None:
    for worker in ("c", "b", "a"):
        s.store.worker_seen(s.conn, worker, ["q"], ["t"])
    s.advance(WORKER_ALIVE_WITHIN - 10)
    s.store.worker_seen(s.conn, "c", [], [])
    assert [w.worker_id for w in s.store.workers(s.conn)] == ["a", "b", "c"]
    s.advance(10)  # a and b now exactly at the window's edge: gone
    (c,) = s.store.workers(s.conn)
    assert c == WorkerRow("c", [], c.started_at, c.seen_at)


def test_workers_is_empty_with_no_worker(s: StoreCase) -> None:
    assert s.store.workers(s.conn) == []


def test_a_worker_gone_deletes_only_its_own_row(s: StoreCase) -> None:
    s.store.worker_seen(s.conn, "a", ["q"], ["t"])
    s.store.worker_seen(s.conn, "b", ["q"], ["t"])
    s.store.worker_gone(s.conn, "a")
    s.store.worker_gone(s.conn, "never-seen")
    assert [w.worker_id for w in s.store.workers(s.conn)] == ["b"]
    assert kept(s) == ["b"]


def test_a_dead_workers_row_is_kept_an_hour_then_forgotten_when_another_is_seen(
    s: StoreCase,
) -> None:
    s.store.worker_seen(s.conn, "dead", ["q"], ["t"])
    s.store.worker_seen(s.conn, "live", ["q"], ["t"])
    s.advance(WORKER_FORGOTTEN_AFTER - 60)
    s.store.worker_seen(s.conn, "live", ["q"], ["t"])
    assert kept(s) == ["dead", "live"]
    assert [w.worker_id for w in s.store.workers(s.conn)] == ["live"]
    s.advance(61)
    # Forgetting happens only as a worker is seen: reads leave the row.
    s.store.workers(s.conn)
    s.store.unhandled(s.conn)
    assert kept(s) == ["dead", "live"]
    s.store.worker_seen(s.conn, "live", ["q"], ["t"])
    assert kept(s) == ["live"]


def test_a_worker_forgotten_then_seen_again_starts_anew(s: StoreCase) -> None:
    # Read from the table: the row seen anew has the columns' default times (see above).
    def started_is_seen() -> bool:
        ((started, seen),) = select(s, "SELECT started_at, seen_at FROM txqueue_workers")
        return bool(started == seen)

    s.store.worker_seen(s.conn, "w1", ["q"], ["t"])
    s.advance(10)
    s.store.worker_seen(s.conn, "w1", ["q"], ["t"])
    assert not started_is_seen()
    s.advance(WORKER_FORGOTTEN_AFTER + 1)
    s.store.worker_seen(s.conn, "w1", ["q"], ["t"])
    assert started_is_seen()


def test_with_no_worker_every_pending_task_is_unhandled_by_queue_and_name(s: StoreCase) -> None:
    s.enqueue("u")
    s.enqueue("t")
    s.enqueue("t", delay=3600)  # not ripe yet, but pending: nobody will run it either
    s.enqueue("t", queue="r")
    s.enqueue("a", queue="r")
    assert s.store.unhandled(s.conn) == (
        0,
        [("q", "t", 2), ("q", "u", 1), ("r", "a", 1), ("r", "t", 1)],
    )


def test_unhandled_counts_only_pending_tasks(s: StoreCase) -> None:
    running, done, failed, cancelled, pending = (s.enqueue("t") for _ in range(5))
    s.claim(running, done, failed)
    s.store.record_outcomes(
        s.conn,
        [
            Outcome(done, 1, WORKER, "succeeded", result="1"),
            Outcome(failed, 1, WORKER, "failed", error={"type": "E", "message": "m"}),
        ],
    )
    assert s.store.cancel(s.conn, cancelled) == "cancelled"
    assert s.store.unhandled(s.conn) == (0, [("q", "t", 1)])
    assert s.row(pending)["state"] == "pending"


def test_a_live_worker_handles_the_names_it_has_on_the_queues_it_serves(s: StoreCase) -> None:
    for name, queue in [("t", "q"), ("u", "q"), ("t", "r")]:
        s.enqueue(name, queue=queue)
    s.store.worker_seen(s.conn, "w1", ["q"], ["t"])
    assert s.store.unhandled(s.conn) == (1, [("q", "u", 1), ("r", "t", 1)])


def test_a_task_needs_one_worker_with_both_its_queue_and_its_name(s: StoreCase) -> None:
    for name, queue in [("t", "q"), ("u", "q"), ("t", "r")]:
        s.enqueue(name, queue=queue)
    s.store.worker_seen(s.conn, "w1", ["q"], ["u"])
    s.store.worker_seen(s.conn, "w2", ["r"], ["t"])
    # Between them they serve queue q and name t, but neither serves both.
    assert s.store.unhandled(s.conn) == (2, [("q", "t", 1)])


def test_a_worker_past_the_alive_window_handles_nothing(s: StoreCase) -> None:
    s.enqueue("t")
    s.store.worker_seen(s.conn, "w1", ["q"], ["t"])
    s.advance(WORKER_ALIVE_WITHIN - 5)
    assert s.store.unhandled(s.conn) == (1, [])
    s.advance(5)
    assert s.store.unhandled(s.conn) == (0, [("q", "t", 1)])


def test_a_worker_gone_handles_nothing(s: StoreCase) -> None:
    s.enqueue("t")
    s.store.worker_seen(s.conn, "w1", ["q"], ["t"])
    s.store.worker_seen(s.conn, "w2", ["q"], ["u"])
    s.store.worker_gone(s.conn, "w1")
    assert s.store.unhandled(s.conn) == (1, [("q", "t", 1)])


def test_unhandled_with_no_task_is_empty_whatever_the_workers(s: StoreCase) -> None:
    assert s.store.unhandled(s.conn) == (0, [])
    s.store.worker_seen(s.conn, "w1", [], [])
    assert s.store.unhandled(s.conn) == (1, [])


def test_a_claimed_task_is_not_unhandled_even_with_no_worker_for_its_name(s: StoreCase) -> None:
    task = s.enqueue("x")
    s.claim(task, with_=defaults("x"))
    assert s.store.unhandled(s.conn) == (0, [])


def test_workers_lists_the_first_thousand_by_id(s: StoreCase) -> None:
    s.store.worker_seen(s.conn, "w10000", ["q"], ["t"])
    # Its row copied a thousand times over (as many calls would take seconds).
    s.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) "
        "INSERT INTO txqueue_workers (worker_id, queues, names, started_at, seen_at) "
        "SELECT 'w' || (10000 + i), queues, names, started_at, seen_at "
        "FROM n, txqueue_workers WHERE worker_id = 'w10000'"
    )
    listed = [w.worker_id for w in s.store.workers(s.conn)]
    assert listed == [f"w{n}" for n in range(10000, 11000)]
    assert s.store.unhandled(s.conn) == (1001, [])  # the count has no such bound


def test_handled_maps_each_live_workers_names_to_the_queues_they_serve_them_on(
    s: StoreCase,
) -> None:
    assert s.store.handled(s.conn) == {}  # no worker ever seen
    s.store.worker_seen(s.conn, "w1", ["q", "r"], ["t", "u"])
    s.store.worker_seen(s.conn, "w2", ["p", "q"], ["t"])
    s.store.worker_seen(s.conn, "w3", [], ["idle"])  # serves no queue: handles nothing
    assert s.store.handled(s.conn) == {"t": ["p", "q", "r"], "u": ["q", "r"]}
    s.store.worker_gone(s.conn, "w1")
    assert s.store.handled(s.conn) == {"t": ["p", "q"]}
    s.advance(WORKER_ALIVE_WITHIN)
    assert s.store.handled(s.conn) == {}
