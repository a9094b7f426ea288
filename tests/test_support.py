"""The suite's own wait helpers (tests/support.py): what they return, and that a timeout says
what was awaited and the last value seen. No daemons; each wait gives up after a few polls."""

from __future__ import annotations

import pytest

from tests.support import wait_for, wait_until

SHORT = 0.05  # seconds: these conditions never hold, so every wait here runs to its deadline


def test_wait_until_returns_the_truthy_value() -> None:
    values = iter([0, None, [], "ready"])
    assert wait_until(lambda: next(values)) == "ready"


def test_wait_until_with_until_returns_a_falsy_value_that_satisfies_it() -> None:
    values = iter([3, 2, 1, 0])
    assert wait_until(lambda: next(values), until=lambda n: n == 0) == 0


def test_a_timeout_names_what_was_awaited_and_the_last_value() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"waiting for the answer \(last value: 41\)"):
        wait_until(lambda: 41, SHORT, "the answer", until=lambda n: n == 42)


def test_without_what_the_message_quotes_the_condition() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"lambda: len\(\[\]\) > 0"):
        wait_until(lambda: len([]) > 0, SHORT)


async def test_wait_for_awaits_async_probes() -> None:
    seen: list[int] = []

    async def probe() -> int:
        seen.append(len(seen))
        return len(seen)

    assert await wait_for(probe, until=lambda n: n >= 3) == 3
    assert await wait_for(lambda: seen) == [0, 1, 2]


async def test_wait_for_times_out_like_wait_until() -> None:
    async def never() -> bool:
        return False

    with pytest.raises(pytest.fail.Exception, match=r"after 0.05s waiting for never"):
        await wait_for(never, SHORT)
