"""lead and resign: a role held by one process at a time through a renewed lease, decided by
the database's clock alone."""

from __future__ import annotations

import pytest

from ..case import StoreCase

# Real time passes between the statements of a test, on top of the moved clock.
SLACK = 2.0


def left(seconds: float) -> object:
    return pytest.approx(seconds, abs=SLACK)


def test_a_free_role_is_taken_for_the_seconds_asked(s: StoreCase) -> None:
    lease = s.store.lead(s.conn, "cleaner", "a", 30)
    assert lease.holder == "a"
    assert lease.left == left(30)


def test_a_held_role_is_refused_with_the_holder_and_its_time_left(s: StoreCase) -> None:
    s.store.lead(s.conn, "cleaner", "a", 30)
    s.advance(10)
    refused = s.store.lead(s.conn, "cleaner", "b", 60)
    assert (refused.holder, refused.left) == ("a", left(20))
    # The refusal wrote nothing: the holder's lease runs on from where it was.
    s.advance(5)
    assert s.store.lead(s.conn, "cleaner", "b", 60).left == left(15)


def test_the_holder_renews_its_lease_for_the_seconds_asked_now(s: StoreCase) -> None:
    s.store.lead(s.conn, "cleaner", "a", 30)
    s.advance(20)
    renewed = s.store.lead(s.conn, "cleaner", "a", 30)
    assert (renewed.holder, renewed.left) == ("a", left(30))
    # A renewal may also shorten the lease.
    assert s.store.lead(s.conn, "cleaner", "a", 5).left == left(5)
    s.advance(6)
    assert s.store.lead(s.conn, "cleaner", "b", 30).holder == "b"


def test_a_lapsed_lease_is_taken_over_by_the_next_to_ask(s: StoreCase) -> None:
    s.store.lead(s.conn, "cleaner", "a", 30)
    s.advance(31)
    taken = s.store.lead(s.conn, "cleaner", "b", 10)
    assert (taken.holder, taken.left) == ("b", left(10))
    refused = s.store.lead(s.conn, "cleaner", "a", 10)
    assert (refused.holder, refused.left) == ("b", left(10))


def test_a_lease_lapses_at_its_length_not_after(s: StoreCase) -> None:
    s.store.lead(s.conn, "cleaner", "a", 30)
    s.advance(30)
    assert s.store.lead(s.conn, "cleaner", "b", 10).holder == "b"


def test_a_lapsed_holder_asking_again_takes_it_back(s: StoreCase) -> None:
    s.store.lead(s.conn, "cleaner", "a", 5)
    s.advance(60)
    again = s.store.lead(s.conn, "cleaner", "a", 5)
    assert (again.holder, again.left) == ("a", left(5))


def test_a_lease_of_no_time_or_less_is_lapsed_at_once(s: StoreCase) -> None:
    # The lease is still written and reported, with its (negative) time left.
    lapsed = s.store.lead(s.conn, "cleaner", "a", -3)
    assert (lapsed.holder, lapsed.left) == ("a", left(-3))
    zero = s.store.lead(s.conn, "other", "a", 0)
    assert (zero.holder, zero.left) == ("a", left(0))
    assert s.store.lead(s.conn, "cleaner", "b", 10).holder == "b"
    assert s.store.lead(s.conn, "other", "b", 10).holder == "b"


def test_resigning_frees_the_role_at_once(s: StoreCase) -> None:
    s.store.lead(s.conn, "cleaner", "a", 30)
    s.store.resign(s.conn, "cleaner", "a")
    taken = s.store.lead(s.conn, "cleaner", "b", 30)
    assert (taken.holder, taken.left) == ("b", left(30))


def test_resigning_a_role_held_by_another_does_nothing(s: StoreCase) -> None:
    s.store.lead(s.conn, "cleaner", "a", 30)
    s.store.resign(s.conn, "cleaner", "b")
    refused = s.store.lead(s.conn, "cleaner", "b", 30)
    assert (refused.holder, refused.left) == ("a", left(30))


def test_resigning_a_lapsed_lease_that_another_took_leaves_the_new_holder(s: StoreCase) -> None:
    s.store.lead(s.conn, "cleaner", "a", 5)
    s.advance(6)
    s.store.lead(s.conn, "cleaner", "b", 30)
    s.store.resign(s.conn, "cleaner", "a")
    assert s.store.lead(s.conn, "cleaner", "a", 30).holder == "b"


def test_resigning_a_role_nobody_holds_is_harmless(s: StoreCase) -> None:
    s.store.resign(s.conn, "nobody's", "a")
    assert s.store.lead(s.conn, "nobody's", "a", 30).holder == "a"


def test_roles_are_held_apart(s: StoreCase) -> None:
    s.store.lead(s.conn, "cleaner", "a", 30)
    assert s.store.lead(s.conn, "scheduler", "b", 30).holder == "b"
    s.store.resign(s.conn, "scheduler", "b")
    assert s.store.lead(s.conn, "cleaner", "b", 30).holder == "a"
