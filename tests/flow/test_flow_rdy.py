"""RDY distribution outside backoff: shares, joins and leaves, max_rdy_count, max_in_flight changes,
redistribution when there are more connections than max_in_flight, and close.

Every call goes through the Harness, which checks the budget invariant after each single change.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsqclient.config import Config
from nsqclient.errors import ConfigError
from nsqclient.flow import (
    ExponentialBackoff,
    FullJitterBackoff,
    Outcome,
    RdyChange,
    RdyController,
    per_connection_share,
)

from .support import Harness, make_controller


def rc(conn: str, count: int) -> RdyChange:
    return RdyChange(conn, count)


@pytest.mark.parametrize(
    ("max_in_flight", "num_conns", "share"),
    [(0, 3, 0), (1, 1, 1), (1, 3, 1), (2, 3, 1), (5, 3, 1), (6, 3, 2), (100, 3, 33), (7, 0, 7)],
)
def test_per_connection_share_matches_go_nsq(
    max_in_flight: int, num_conns: int, share: int
) -> None:
    assert per_connection_share(max_in_flight, num_conns) == share
    if num_conns:
        go = int(min(max(1, max_in_flight / num_conns), max_in_flight))
        assert share == go


# -- joins, leaves, max_rdy_count --


def test_first_connection_gets_the_whole_budget() -> None:
    h = Harness.new(10)
    assert h.add("a") == (rc("a", 10),)
    assert h.ctl.next_deadline() is None  # nothing to redistribute


def test_join_lowers_existing_connections_before_raising_the_newcomer() -> None:
    h = Harness.new(10)
    h.add("a")
    assert h.add("b") == (rc("a", 5), rc("b", 5))
    assert h.add("c") == (rc("a", 3), rc("b", 3), rc("c", 3))


def test_leave_returns_rdy_to_the_pool_and_tops_up_the_rest() -> None:
    h = Harness.new(10)
    for conn in "abc":
        h.add(conn)
    assert h.remove("b") == (rc("a", 5), rc("c", 5))
    assert h.remove("a") == (rc("c", 10),)
    assert h.remove("c") == ()
    assert h.ctl.total_rdy == 0


def test_removing_an_unknown_connection_is_a_no_op() -> None:
    h = Harness.new(10)
    h.add("a")
    assert h.remove("zzz") == ()
    assert h.ctl.rdy("a") == 10


def test_adding_a_connection_twice_is_a_bug() -> None:
    h = Harness.new(10)
    h.add("a")
    with pytest.raises(ValueError):
        h.ctl.add_connection("a", 2500, h.now)


def test_max_rdy_count_clamps_a_connection() -> None:
    h = Harness.new(100)
    assert h.add("a", max_rdy=20) == (rc("a", 20),)
    assert h.add("b", max_rdy=2500) == (rc("b", 50),)  # a is already below the share
    assert h.set_max(10) == (rc("a", 5), rc("b", 5))
    assert h.set_max(3000) == (rc("a", 20), rc("b", 1500))


def test_a_connection_with_max_rdy_zero_never_gets_rdy() -> None:
    h = Harness.new(1)
    h.add("a", max_rdy=0)
    h.add("b")
    assert h.ctl.rdy("a") == 0 and h.ctl.rdy("b") == 1
    for _ in range(10):
        h.to_deadline()
        assert h.ctl.rdy("a") == 0 and h.ctl.rdy("b") == 1


# -- max_in_flight changes --


def test_set_max_in_flight_up_down_and_pause() -> None:
    h = Harness.new(10)
    h.add("a")
    h.add("b")
    assert h.set_max(4) == (rc("a", 2), rc("b", 2))
    assert h.set_max(0) == (rc("a", 0), rc("b", 0))  # pause
    assert h.ctl.next_deadline() is None
    assert h.set_max(0) == ()
    assert h.set_max(6) == (rc("a", 3), rc("b", 3))  # resume
    assert h.set_max(6) == ()


def test_lowering_max_in_flight_below_the_number_of_connections() -> None:
    h = Harness.new(9)
    for conn in "abc":
        h.add(conn)
    changes = h.set_max(1)
    assert sorted(c.count for c in changes) == [0, 0, 1]  # all three are decreases from 3
    assert h.ctl.total_rdy == 1 and len(h.holders()) == 1
    assert h.ctl.next_deadline() == h.now + 5.0


def test_raising_max_in_flight_from_below_the_number_of_connections() -> None:
    h = Harness.new(1)
    for conn in "abcd":
        h.add(conn)
    assert h.ctl.total_rdy == 1
    h.set_max(3)
    assert h.ctl.total_rdy == 3
    h.set_max(8)
    assert h.wire == {"a": 2, "b": 2, "c": 2, "d": 2}
    assert h.ctl.next_deadline() is None


def test_set_max_in_flight_rejects_bad_values() -> None:
    h = Harness.new(1)
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError):
            h.ctl.set_max_in_flight(bad, h.now)  # type: ignore[arg-type]


# -- fewer slots than connections: redistribution and starvation --


def test_more_connections_than_max_in_flight_gives_rdy_1_to_some() -> None:
    h = Harness.new(2)
    assert h.add("a") == (rc("a", 2),)
    assert h.add("b") == (rc("a", 1), rc("b", 1))
    assert h.add("c") == ()  # no budget left: c waits for redistribution
    assert h.ctl.next_deadline() == h.now + 5.0


def test_a_busy_connection_keeps_its_rdy_until_low_rdy_timeout() -> None:
    h = Harness.new(1)
    h.add("a")
    h.add("b")
    for _ in range(5):  # 25 s: messages keep arriving on a; RDY set 25 s ago < 30 s
        h.received("a")
        h.to_deadline()
        assert h.holders() == {"a"}
    h.received("a")
    h.to_deadline()  # 30 s: not "more than" 30 s yet
    assert h.holders() == {"a"}
    h.received("a")
    h.to_deadline()  # 35 s: RDY held too long, handed to the one that waited
    assert h.holders() == {"b"}


def test_an_idle_connection_gives_up_its_rdy() -> None:
    h = Harness.new(1)
    h.add("a")
    h.received("a")
    h.add("b")
    h.to_deadline()  # 5 s after a's last message: not idle yet
    assert h.holders() == {"a"}
    h.to_deadline()  # 10 s: not "more than" 10 s
    assert h.holders() == {"a"}
    h.to_deadline()  # 15 s: idle
    assert h.holders() == {"b"}


@pytest.mark.parametrize(("num_conns", "max_in_flight"), [(3, 1), (3, 2), (5, 2), (8, 3)])
def test_every_idle_connection_gets_a_turn(num_conns: int, max_in_flight: int) -> None:
    h = Harness.new(max_in_flight, seed=num_conns)
    conns = [f"c{i}" for i in range(num_conns)]
    for conn in conns:
        h.add(conn)
    for _ in range(math.ceil(num_conns / max_in_flight)):
        h.to_deadline()
    assert h.ever_served == set(conns)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    num_conns=st.integers(2, 9),
    data=st.data(),
    busy=st.booleans(),
)
def test_no_connection_starves(seed: int, num_conns: int, data: st.DataObject, busy: bool) -> None:
    """With more connections than slots, each one holds RDY at some point within a bound."""
    mif = data.draw(st.integers(1, num_conns - 1))
    h = Harness.new(mif, seed=seed)
    conns = [f"c{i}" for i in range(num_conns)]
    for conn in conns:
        h.add(conn)
    rounds_per_turn = 1 if not busy else math.ceil(30.0 / 5.0) + 1
    for _ in range(math.ceil(num_conns / mif) * rounds_per_turn):
        if busy:  # holders keep receiving, so only low_rdy_timeout moves RDY
            for holder in h.holders():
                h.received(holder)
        h.to_deadline()
    assert h.ever_served == set(conns)


def test_leaving_holder_hands_its_slot_to_a_waiting_connection_at_once() -> None:
    h = Harness.new(1)
    h.add("a")
    h.add("b")
    h.add("c")
    assert h.holders() == {"a"}
    changes = h.remove("a")
    assert len(changes) == 1 and changes[0].count == 1
    assert h.holders() in ({"b"}, {"c"})


def test_redistribution_stops_when_connections_fit_again() -> None:
    h = Harness.new(2)
    for conn in "abc":
        h.add(conn)
    assert h.ctl.next_deadline() is not None
    h.remove("c")
    assert h.wire == {"a": 1, "b": 1}
    assert h.ctl.next_deadline() is None


def test_ticks_before_the_deadline_change_nothing() -> None:
    h = Harness.new(1)
    h.add("a")
    h.add("b")
    assert h.advance(4.999) == ()
    assert h.holders() == {"a"}


def test_same_seed_same_decisions() -> None:
    def run(seed: int) -> list[RdyChange]:
        h = Harness.new(2, seed=seed)
        for conn in "abcdef":
            h.add(conn)
        for _ in range(20):
            h.to_deadline()
        return h.sent

    assert run(1) == run(1)


# -- hot path, close, construction --


def test_success_outside_backoff_returns_the_shared_empty_tuple() -> None:
    h = Harness.new(10)
    h.add("a")
    first = h.ctl.message_result(Outcome.SUCCESS, h.now)
    assert first == ()
    assert h.ctl.message_result(Outcome.SUCCESS, h.now) is first
    assert h.ctl.message_result(Outcome.NEUTRAL, h.now) is first
    assert h.ctl.tick(h.now) is first


def test_close_sends_rdy_0_and_stops_deciding() -> None:
    h = Harness.new(10)
    h.add("a")
    h.add("b")
    h.add("c", max_rdy=0)
    assert h.close() == (rc("a", 0), rc("b", 0))
    assert h.close() == ()
    assert h.add("d") == ()
    assert h.set_max(100) == ()
    assert h.result(Outcome.FAILURE) == ()
    assert h.remove("a") == ()
    assert h.advance(100.0) == ()
    assert h.ctl.next_deadline() is None and not h.ctl.in_backoff


def test_close_during_backoff_stops_the_timer() -> None:
    h = Harness.new(10)
    h.add("a")
    h.result(Outcome.FAILURE)
    assert h.ctl.next_deadline() is not None
    assert h.close() == ()
    assert h.ctl.next_deadline() is None
    assert h.advance(10.0) == ()


def test_from_config_converts_milliseconds_and_picks_the_strategy() -> None:
    ctl = RdyController.from_config(Config(max_in_flight=4), rng=random.Random(0))
    h = Harness(ctl)
    h.add("a")
    assert h.wire == {"a": 4}
    h.result(Outcome.FAILURE)
    assert ctl.next_deadline() == h.now + 2.0  # backoff_multiplier 1000 ms, level 1

    jitter = RdyController.from_config(
        Config(backoff_strategy="full_jitter", backoff_multiplier=1000), rng=random.Random(0)
    )
    hj = Harness(jitter)
    hj.add("a")
    hj.result(Outcome.FAILURE)
    deadline = jitter.next_deadline()
    assert deadline is not None and hj.now <= deadline < hj.now + 2.0

    assert ctl.strategy == "adaptive"  # the default
    slow = RdyController.from_config(
        Config(max_in_flight=1, rdy_redistribute_interval=2000, rdy_strategy="even")
    )
    assert slow.strategy == "even"
    hs = Harness(slow)
    hs.add("a")
    hs.add("b")
    assert slow.next_deadline() == hs.now + 2.0


@pytest.mark.parametrize(
    "overrides",
    [
        {"max_backoff_duration": -1.0},
        {"low_rdy_idle_timeout": math.nan},
        {"low_rdy_timeout": math.inf},
        {"redistribute_interval": 0.0},
    ],
)
def test_constructor_refuses_bad_durations(overrides: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        make_controller(1, **overrides)  # type: ignore[arg-type]


def test_constructor_refuses_bad_arguments() -> None:
    with pytest.raises(ConfigError):
        make_controller(-1)
    with pytest.raises(ConfigError):
        RdyController(
            1,
            backoff=object(),
            max_backoff_duration=1,
            low_rdy_idle_timeout=1,  # type: ignore[arg-type]
            low_rdy_timeout=1,
            redistribute_interval=1,
        )
    h = Harness.new(1)
    with pytest.raises(ConfigError):
        h.ctl.add_connection("a", -1, h.now)


def test_strategies_are_accepted_as_backoff() -> None:
    make_controller(1, backoff=FullJitterBackoff(1.0, rng=random.Random(1)))
    make_controller(1, backoff=ExponentialBackoff(0.5))


def test_a_freed_slot_goes_to_the_connection_that_waited_longest() -> None:
    h = Harness.new(1)
    h.add("a")
    h.add("b")
    h.now += 1.0
    h.add("c")  # joined later than b, so b has waited longer
    assert h.holders() == {"a"}
    assert h.remove("a") == (rc("b", 1),)
    assert h.remove("b") == (rc("c", 1),)
