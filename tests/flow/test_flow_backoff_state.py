"""The consumer backoff state machine (protocol notes §11.6): entering, testing with RDY 1, walking
down and up, the level cap, neutral results, ignored results, reconnects during backoff.
"""

from __future__ import annotations

import random

import pytest

from nsqclient.flow import MAX_BACKOFF_LEVEL, ExponentialBackoff, FullJitterBackoff, Outcome

from .support import Harness, drive_out_of_backoff

S, F, N = Outcome.SUCCESS, Outcome.FAILURE, Outcome.NEUTRAL


def two_conns(mif: int = 10, **kwargs: object) -> Harness:
    h = Harness.new(mif, **kwargs)
    h.add("a")
    h.add("b")
    return h


def fail_and_test(h: Harness) -> None:
    """A failure from the test message, then wait out the window until the next RDY 1."""
    h.result(F)
    h.to_deadline()


def test_failure_enters_backoff_with_rdy_0_everywhere() -> None:
    h = two_conns()
    start = h.now
    changes = h.result(F)
    assert sorted((c.conn, c.count) for c in changes) == [("a", 0), ("b", 0)]
    assert h.ctl.backoff_level == 1 and h.ctl.in_backoff and h.ctl.backoff_timeout_active
    assert h.ctl.next_deadline() == start + 2.0


def test_results_during_the_window_are_ignored() -> None:
    h = two_conns()
    h.result(F)
    deadline = h.ctl.next_deadline()
    for outcome in (F, F, S, S, S, N):
        assert h.result(outcome) == ()
    assert h.ctl.backoff_level == 1 and h.ctl.next_deadline() == deadline


def test_window_end_sends_rdy_1_to_one_connection() -> None:
    h = two_conns()
    h.result(F)
    assert h.advance(1.999) == ()
    h.to_deadline()
    assert len(h.holders()) == 1 and h.ctl.total_rdy == 1
    assert not h.ctl.backoff_timeout_active and h.ctl.in_backoff


def test_success_at_level_1_leaves_backoff_and_restores_shares() -> None:
    h = two_conns()
    fail_and_test(h)
    h.result(S)
    assert not h.ctl.in_backoff and h.ctl.backoff_level == 0
    assert h.wire == {"a": 5, "b": 5}
    assert h.ctl.next_deadline() is None


def test_failures_walk_the_level_up_with_doubling_windows() -> None:
    h = two_conns()
    for level in range(1, 6):
        before = h.now
        h.result(F)
        assert h.ctl.backoff_level == level
        assert h.ctl.next_deadline() == before + 2.0**level
        h.to_deadline()


def test_successes_walk_the_level_down_with_shorter_windows() -> None:
    h = two_conns()
    for _ in range(3):
        fail_and_test(h)
    assert h.ctl.backoff_level == 3
    for level in (2, 1):
        before = h.now
        changes = h.result(S)
        assert [c.count for c in changes] == [0]  # only the test holder had RDY
        assert h.ctl.backoff_level == level and h.ctl.next_deadline() == before + 2.0**level
        h.to_deadline()
    h.result(S)
    assert not h.ctl.in_backoff and h.wire == {"a": 5, "b": 5}


@pytest.mark.parametrize(
    ("max_backoff", "cap", "window_at_cap"),
    [(120.0, 6, 64.0), (64.0, 6, 64.0), (63.9, 5, 32.0), (2.0, 1, 2.0)],
)
def test_the_level_stops_at_the_cap(max_backoff: float, cap: int, window_at_cap: float) -> None:
    h = two_conns(max_backoff_duration=max_backoff)
    for _ in range(cap + 5):
        before = h.now
        fail_and_test(h)
        assert h.ctl.backoff_level <= cap
    assert h.ctl.backoff_level == cap
    before = h.now
    h.result(F)  # a failure at the cap re-arms a window at the same level
    assert h.ctl.backoff_level == cap and h.ctl.next_deadline() == before + window_at_cap


def test_backoff_shorter_than_two_multipliers_never_starts() -> None:
    """go-nsq's rule: level 1 needs multiplier * 2 <= max_backoff_duration."""
    h = two_conns(max_backoff_duration=1.5)
    assert h.result(F) == ()
    assert not h.ctl.in_backoff


@pytest.mark.parametrize("multiplier", [1.0, 0.0])
def test_max_backoff_duration_zero_disables_backoff(multiplier: float) -> None:
    h = two_conns(max_backoff_duration=0.0, backoff=ExponentialBackoff(multiplier))
    for _ in range(5):
        assert h.result(F) == ()
    assert not h.ctl.in_backoff and h.wire == {"a": 5, "b": 5}
    assert h.ctl.next_deadline() is None


def test_zero_multiplier_backs_off_with_empty_windows_up_to_the_hard_cap() -> None:
    h = two_conns(backoff=ExponentialBackoff(0.0))
    for _ in range(MAX_BACKOFF_LEVEL + 3):
        before = h.now
        h.result(F)
        assert h.ctl.next_deadline() == before
        h.to_deadline()
    assert h.ctl.backoff_level == MAX_BACKOFF_LEVEL
    drive_out_of_backoff(h)
    assert h.wire == {"a": 5, "b": 5}


def test_neutral_results_do_not_move_the_level_or_the_window() -> None:
    h = two_conns()
    assert h.result(N) == ()
    assert not h.ctl.in_backoff
    fail_and_test(h)
    holder = h.holders()
    for _ in range(3):
        assert h.result(N) == ()
    assert h.ctl.backoff_level == 1 and h.holders() == holder
    assert not h.ctl.backoff_timeout_active  # deviation from go-nsq: no new window
    h.result(S)
    assert not h.ctl.in_backoff


def test_success_outside_backoff_and_failure_while_disabled_do_nothing() -> None:
    h = two_conns()
    for _ in range(3):
        assert h.result(S) == ()
    assert h.ctl.backoff_level == 0


def test_full_jitter_windows_stay_below_the_exponential_bound() -> None:
    h = two_conns(backoff=FullJitterBackoff(1.0, rng=random.Random(5)))
    windows = []
    for level in range(1, 7):
        before = h.now
        h.result(F)
        assert h.ctl.backoff_level == level  # capped by the bound, not by the random draw
        deadline = h.ctl.next_deadline()
        assert deadline is not None
        windows.append(deadline - before)
        assert 0.0 <= deadline - before < 2.0**level
        h.to_deadline()
    h.result(F)
    assert h.ctl.backoff_level == 6  # 2**7 > 120: same cap as exponential
    assert len(set(windows)) == len(windows)


# -- connections coming and going during backoff --


def test_new_connection_during_the_window_gets_nothing_until_backoff_ends() -> None:
    h = two_conns()
    h.result(F)
    assert h.add("c") == ()
    h.to_deadline()
    assert h.ctl.total_rdy == 1
    assert h.add("d") == ()  # during the test, too
    assert h.ctl.total_rdy == 1
    h.result(S)
    assert h.wire == {"a": 2, "b": 2, "c": 2, "d": 2}


def test_test_holder_leaving_hands_rdy_1_to_another_connection() -> None:
    h = two_conns()
    fail_and_test(h)
    (holder,) = h.holders()
    changes = h.remove(holder)
    assert [c.count for c in changes] == [1]
    assert len(h.holders()) == 1 and h.ctl.in_backoff


def test_last_connection_leaving_during_the_test_re_arms_the_timer() -> None:
    h = two_conns()
    fail_and_test(h)
    h.remove("a")
    h.remove("b")
    assert h.ctl.backoff_timeout_active
    assert h.ctl.next_deadline() == h.now + 1.0
    h.to_deadline()  # nobody to test with: try again in 1 s
    assert h.ctl.next_deadline() == h.now + 1.0
    assert h.add("c") == ()  # reconnected, but the window is still running
    h.to_deadline()
    assert h.wire == {"c": 1}
    h.result(S)
    assert not h.ctl.in_backoff and h.wire == {"c": 10}


def test_reconnect_during_the_window_then_walk_out() -> None:
    h = two_conns()
    for _ in range(3):
        fail_and_test(h)
    h.result(F)  # level 4, window running
    h.remove("a")
    h.remove("b")
    h.add("a2")
    h.add("b2")
    assert h.ctl.total_rdy == 0
    drive_out_of_backoff(h)
    assert h.wire == {"a2": 5, "b2": 5}


def test_churn_on_every_step_of_the_walk_down_still_exits() -> None:
    h = two_conns()
    for _ in range(4):
        fail_and_test(h)
    for i in range(4):
        (holder,) = h.holders()
        h.remove(holder)  # the test connection drops right before its result arrives
        h.add(f"new{i}")
        h.received(next(iter(h.holders())))
        h.result(S)
        if h.ctl.in_backoff:
            h.to_deadline()
    assert not h.ctl.in_backoff
    assert h.ctl.total_rdy == 10 and len(h.wire) == 2


def test_redistribution_moves_the_test_rdy_off_an_idle_connection() -> None:
    h = two_conns()
    fail_and_test(h)
    (holder,) = h.holders()
    assert h.ctl.next_deadline() == h.now + 5.0
    h.to_deadline()  # the holder never got a message: idle, so the other one tries
    assert h.holders() == {"a", "b"} - {holder}


def test_single_connection_keeps_the_test_rdy_without_a_timer() -> None:
    h = Harness.new(10)
    h.add("a")
    fail_and_test(h)
    assert h.wire == {"a": 1}
    assert h.ctl.next_deadline() is None  # only a result can move things on


# -- max_in_flight changes during backoff --


def test_new_max_in_flight_waits_for_backoff_to_end() -> None:
    h = two_conns()
    fail_and_test(h)
    assert h.set_max(4) == ()
    assert h.ctl.total_rdy == 1
    h.result(S)
    assert h.wire == {"a": 2, "b": 2}


def test_pause_during_backoff_withdraws_the_test_and_resume_restores_it() -> None:
    h = two_conns()
    fail_and_test(h)
    changes = h.set_max(0)
    assert [c.count for c in changes] == [0]
    assert h.ctl.next_deadline() is None
    changes = h.set_max(6)
    assert [c.count for c in changes] == [1]
    h.result(S)
    assert h.wire == {"a": 3, "b": 3}


def test_window_ending_while_paused_waits_for_resume() -> None:
    h = two_conns()
    h.result(F)
    h.set_max(0)
    h.to_deadline()
    assert h.ctl.total_rdy == 0 and h.ctl.next_deadline() is None
    assert h.set_max(2) != ()
    assert h.ctl.total_rdy == 1
    h.result(S)
    assert h.wire == {"a": 1, "b": 1}


def test_a_connection_that_cannot_take_rdy_is_never_the_tester() -> None:
    h = Harness.new(10)
    h.add("zero", max_rdy=0)
    h.result(F)
    h.to_deadline()
    assert h.ctl.total_rdy == 0 and h.ctl.next_deadline() == h.now + 1.0
    h.add("ok")
    h.to_deadline()
    assert h.wire == {"zero": 0, "ok": 1}


def test_the_test_rdy_rotates_instead_of_retrying_a_failing_connection() -> None:
    h = Harness.new(10)
    for conn in "abc":
        h.add(conn)
    h.result(F)
    testers = []
    for _ in range(3):
        h.to_deadline()
        (holder,) = h.holders()
        testers.append(holder)
        h.result(F)
    assert sorted(testers, key=repr) == ["a", "b", "c"]
