"""Requeue delay and give-up arithmetic (go-nsq's linear delay, max_attempts semantics)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nsqclient.errors import InvalidArgumentError
from nsqclient.flow import requeue_delay_ms, should_give_up


@pytest.mark.parametrize(
    ("attempts", "default", "maximum", "expected"),
    [
        (1, 90_000, 900_000, 90_000),
        (2, 90_000, 900_000, 180_000),
        (9, 90_000, 900_000, 810_000),
        (10, 90_000, 900_000, 900_000),
        (11, 90_000, 900_000, 900_000),
        (65_535, 90_000, 900_000, 900_000),
        (0, 90_000, 900_000, 0),
        (3, 1.5, 900_000, 4),  # 4.5 ms: fractions dropped, as go-nsq writes whole ms
        (5, 0, 900_000, 0),
        (5, 90_000, 0, 0),
    ],
)
def test_requeue_delay_is_linear_and_capped(
    attempts: int, default: float, maximum: float, expected: int
) -> None:
    got = requeue_delay_ms(attempts, default, maximum)
    assert got == expected
    assert type(got) is int


@given(st.integers(0, 65_535), st.integers(0, 3_600_000), st.integers(0, 3_600_000))
def test_requeue_delay_never_exceeds_the_cap(attempts: int, default: int, maximum: int) -> None:
    got = requeue_delay_ms(attempts, default, maximum)
    assert 0 <= got <= maximum
    assert got == min(default * attempts, maximum)


@pytest.mark.parametrize("bad", [-1, 1.5, True, None])
def test_requeue_delay_refuses_bad_attempts(bad: object) -> None:
    with pytest.raises(InvalidArgumentError):
        requeue_delay_ms(bad, 1000, 2000)  # type: ignore[arg-type]


def test_requeue_delay_refuses_negative_delays() -> None:
    with pytest.raises(InvalidArgumentError):
        requeue_delay_ms(1, -1, 2000)
    with pytest.raises(InvalidArgumentError):
        requeue_delay_ms(1, 1, -2000)


@pytest.mark.parametrize(
    ("attempts", "max_attempts", "give_up"),
    [
        (1, 5, False),
        (5, 5, False),  # attempts 1-5 are handled
        (6, 5, True),  # attempt 6 is discarded
        (2, 1, True),
        (1, 1, False),
        (65_535, 0, False),  # 0 = unlimited
        (1, 0, False),
    ],
)
def test_should_give_up(attempts: int, max_attempts: int, give_up: bool) -> None:
    assert should_give_up(attempts, max_attempts) is give_up
