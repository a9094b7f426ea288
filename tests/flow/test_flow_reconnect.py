"""ReconnectBackoff: exponential growth, the cap, jitter bounds, reset, config units."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqclient.config import Config
from nsqclient.errors import ConfigError
from nsqclient.flow import ReconnectBackoff


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
