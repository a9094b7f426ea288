"""ReconnectBackoff (growth, cap, jitter, reset, units), ReconnectSchedule (dials on demand, fake
clock) and the lookupd retry backoff."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqclient.config import Config
from nsqclient.errors import ConfigError
from nsqclient.flow import ReconnectBackoff, ReconnectSchedule, lookupd_retry_backoff


def test_without_jitter_delays_double_up_to_the_cap() -> None:
    rb = ReconnectBackoff(1.0, 60.0, jitter=0.0)
    assert [rb.next_delay() for _ in range(9)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert rb.attempts == 9


def test_reset_starts_again_from_initial() -> None:
    rb = ReconnectBackoff(0.5, 8.0, jitter=0.0)
    for _ in range(5):
        rb.next_delay()
    rb.reset()
    assert rb.attempts == 0
    assert rb.next_delay() == 0.5
    assert rb.next_delay() == 1.0


@given(
    seed=st.integers(0, 2**32),
    initial=st.floats(0.001, 10.0),
    factor=st.floats(1.0, 1000.0),
    jitter=st.floats(0.0, 1.0),
    n=st.integers(1, 80),
)
def test_jittered_delays_stay_within_bounds(
    seed: int, initial: float, factor: float, jitter: float, n: int
) -> None:
    maximum = initial * factor
    rb = ReconnectBackoff(initial, maximum, jitter=jitter, rng=random.Random(seed))
    for attempt in range(n):
        base = min(maximum, initial * 2.0**attempt)
        d = rb.next_delay()
        assert base * (1 - jitter) - 1e-12 <= d <= base
        assert d <= maximum


def test_jitter_actually_spreads_delays_and_is_deterministic() -> None:
    def run(seed: int) -> list[float]:
        rb = ReconnectBackoff(10.0, 10.0, jitter=0.5, rng=random.Random(seed))
        return [rb.next_delay() for _ in range(50)]

    assert run(3) == run(3)
    assert len(set(run(3))) > 40
    assert min(run(3)) < 7.5 < max(run(3))


def test_many_attempts_do_not_overflow() -> None:
    rb = ReconnectBackoff(1.0, 30.0, jitter=0.0)
    for _ in range(5000):
        d = rb.next_delay()
    assert d == 30.0 and math.isfinite(d)


def test_from_config_converts_milliseconds() -> None:
    rb = ReconnectBackoff.from_config(
        Config(reconnect_delay=250, max_reconnect_delay=1000), jitter=0.0
    )
    assert [rb.next_delay() for _ in range(4)] == [0.25, 0.5, 1.0, 1.0]


@pytest.mark.parametrize(
    ("initial", "maximum", "jitter"),
    [
        (0.0, 1.0, 0.3),
        (-1.0, 1.0, 0.3),
        (2.0, 1.0, 0.3),
        (1.0, math.inf, 0.3),
        (1.0, 2.0, 1.5),
        (1.0, 2.0, -0.1),
    ],
)
def test_bad_arguments_are_refused(initial: float, maximum: float, jitter: float) -> None:
    with pytest.raises(ConfigError):
        ReconnectBackoff(initial, maximum, jitter=jitter)


# --------------------------------------------------------------- ReconnectSchedule (fake clock)


def _schedule(
    *, initial: float = 1.0, maximum: float = 60.0, at_once: bool = False, now: float = 0.0
) -> ReconnectSchedule:
    backoff = ReconnectBackoff(initial, maximum, jitter=0.0)
    return ReconnectSchedule(backoff, initial, now=now, at_once=at_once)


def test_unwanted_the_schedule_is_the_backoff() -> None:
    s = _schedule()
    assert s.wait(0.0, wanted=False) == 1.0  # a lost connection: the first backoff delay
    s.dialing(1.0)
    assert s.failed(1.0) == 2.0
    assert s.wait(1.5, wanted=False) == 1.5
    s.dialing(3.0)
    assert s.failed(3.0) == 4.0
    assert s.wait(3.0, wanted=False) == 4.0
    assert s.attempts == 3  # delays drawn: the first, then one per failure


def test_a_new_node_is_due_at_once() -> None:
    assert _schedule(at_once=True, now=5.0).wait(5.0, wanted=False) == 0.0


def test_wanted_a_grown_backoff_is_cut_short_at_once() -> None:
    """The issue's outage: the backoff has grown to a minute; a publish arrives; it dials now."""
    s = _schedule()
    now = 0.0
    for _ in range(8):  # 1 + 2 + 4 + ... : the backoff reaches its 60 s cap
        now += s.wait(now, wanted=False)
        s.dialing(now)
        s.failed(now)
    assert s.wait(now, wanted=False) == 60.0
    later = now + 10.0  # nsqd came back 10 s into that minute; a publish wants a connection
    assert s.wait(later, wanted=True) == 0.0
    assert s.wait(later, wanted=False) == 50.0  # nobody waits: the backoff as it was


def test_wanted_dials_at_most_once_per_demand_interval() -> None:
    """However often it is asked (50 waiting publishes ask 50 times), the next dial is due one
    ``demand_interval`` after the previous one started: a bounded rate, never a storm."""
    s = _schedule(initial=0.5)
    now = 100.0
    dials = []
    while now < 110.0:  # ten seconds of publishes waiting for an nsqd that stays down
        if s.wait(now, wanted=True) == 0.0:
            dials.append(now)
            s.dialing(now)
            s.failed(now + 0.01)
        now = round(now + 0.01, 2)
    assert dials[0] == 100.0
    assert len(dials) == 20  # once per 0.5 s
    assert all(b - a >= 0.5 - 1e-9 for a, b in itertools.pairwise(dials))


def test_wanted_never_delays_a_background_dial_due_sooner() -> None:
    s = _schedule(initial=1.0)
    s.dialing(0.0)
    s.failed(0.0)  # background due at 1.0
    assert s.wait(0.2, wanted=True) == pytest.approx(0.8)


def test_from_config_dials_on_demand_once_per_reconnect_delay() -> None:
    s = ReconnectSchedule.from_config(
        Config(reconnect_delay=250, max_reconnect_delay=4000), now=0.0, at_once=False
    )
    assert s.demand_interval == 0.25
    s.dialing(1.0)
    s.failed(1.0)  # the next background dial: at least 0.35 s later (0.5 s, jittered)
    assert s.wait(1.1, wanted=True) == pytest.approx(0.15)


def test_a_negative_demand_interval_is_refused() -> None:
    with pytest.raises(ConfigError, match="demand interval"):
        ReconnectSchedule(ReconnectBackoff(1.0, 2.0), -1.0, now=0.0, at_once=True)


# --------------------------------------------------------------- lookupd_retry_backoff


def test_a_failed_lookupd_query_is_retried_within_seconds() -> None:
    rb = lookupd_retry_backoff(60.0, rng=random.Random(1))
    rb.jitter = 0.0
    assert [rb.next_delay() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


@pytest.mark.parametrize("interval", [1.0, 2.0, 5.0, 20.0, 300.0])
def test_lookupd_retries_stay_well_below_the_poll_interval(interval: float) -> None:
    rb = lookupd_retry_backoff(interval)
    assert rb.maximum <= interval / 2 and rb.maximum <= 10.0
    assert all(rb.next_delay() <= interval / 2 for _ in range(20))
