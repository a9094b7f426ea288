"""Backoff strategies: go-nsq's durations, full-jitter bounds, determinism, no overflow."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqclient.errors import ConfigError
from nsqclient.flow import BackoffStrategy, ExponentialBackoff, FullJitterBackoff, Outcome


@pytest.mark.parametrize(
    ("multiplier", "level", "expected"),
    [
        (1.0, 0, 1.0),
        (1.0, 1, 2.0),
        (1.0, 6, 64.0),
        (1.0, 7, 128.0),
        (0.25, 3, 2.0),
        (0.0, 5, 0.0),
    ],
)
def test_exponential_is_multiplier_times_two_to_the_level(
    multiplier: float, level: int, expected: float
) -> None:
    strategy = ExponentialBackoff(multiplier)
    assert strategy.duration(level) == expected
    assert strategy.upper_bound(level) == expected


@given(
    seed=st.integers(0, 2**32),
    multiplier=st.floats(0.001, 10.0),
    level=st.integers(1, 40),
)
def test_full_jitter_stays_in_the_half_open_interval(
    seed: int, multiplier: float, level: int
) -> None:
    strategy = FullJitterBackoff(multiplier, rng=random.Random(seed))
    bound = multiplier * 2.0**level
    assert strategy.upper_bound(level) == bound
    for _ in range(20):
        d = strategy.duration(level)
        assert 0.0 <= d < bound


def test_full_jitter_is_random_and_deterministic_given_the_rng() -> None:
    def draws(seed: int) -> list[float]:
        strategy = FullJitterBackoff(1.0, rng=random.Random(seed))
        return [strategy.duration(4) for _ in range(50)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)
    assert len(set(draws(7))) > 40  # actually jittered, not a constant
    assert min(draws(7)) < 4.0 < max(draws(7))  # spread over [0, 16)


def test_full_jitter_with_zero_multiplier_is_zero() -> None:
    assert FullJitterBackoff(0.0, rng=random.Random(1)).duration(3) == 0.0


def test_huge_levels_do_not_overflow() -> None:
    assert ExponentialBackoff(1.0).duration(5000) == math.inf
    assert ExponentialBackoff(0.0).duration(5000) == 0.0
    assert FullJitterBackoff(1.0, rng=random.Random(0)).duration(5000) == math.inf


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan, True, "1"])
def test_bad_multiplier_is_refused(bad: object) -> None:
    with pytest.raises(ConfigError):
        ExponentialBackoff(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        FullJitterBackoff(bad)  # type: ignore[arg-type]


def test_negative_level_is_refused() -> None:
    with pytest.raises(ValueError):
        ExponentialBackoff(1.0).duration(-1)


def test_strategies_satisfy_the_protocol() -> None:
    assert isinstance(ExponentialBackoff(1.0), BackoffStrategy)
    assert isinstance(FullJitterBackoff(1.0), BackoffStrategy)
    assert not isinstance(object(), BackoffStrategy)


def test_outcomes() -> None:
    assert {o.name for o in Outcome} == {"SUCCESS", "FAILURE", "NEUTRAL"}
