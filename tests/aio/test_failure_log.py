"""Issue 51, point 3: the log line of a failed handler says what is done with the settings in
force. With the docs' own give-up settings (``default_requeue_delay=0``, no backoff) it said
"requeueing it (REQ, delayed by attempts) and backing off ... (max_backoff_duration=0 turns this
off)": no delay, no backoff and a switch the user did not use.

The wording is pure (:func:`failure_action`, unit tests); the integration test checks it against
nsqd: the message said to come back at once does, and is given up after ``max_attempts``.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from nsqclient.aio import Message
from nsqclient.aio.delivery import failure_action
from nsqclient.config import Config
from nsqclient.testing.daemons import NsqdProcess
from tests.support import wait_for

from .conftest import DEADLINE, unique
from .reader_support import MakeReader, channel_stats, publish

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("options", "attempts", "says", "never"),
    [
        pytest.param(
            {},
            2,
            ["a delay of 180s", "consumption pauses", "max_backoff_duration=0 turns backoff off"],
            ["at once", "no backoff", "given up"],
            id="defaults",
        ),
        pytest.param(
            {"default_requeue_delay": 0, "max_backoff_duration": 0},
            1,
            ["at once (REQ with no delay: default_requeue_delay=0)", "no backoff"],
            ["delay of", "backing off", "turns backoff off"],
            id="no-delay-no-backoff",
        ),
        pytest.param(
            {"default_requeue_delay": 0, "backoff_multiplier": 0, "max_attempts": 3},
            3,
            ["at once", "without a pause (backoff_multiplier=0)", "given up (max_attempts=3)"],
            ["delay of", "consumption pauses"],
            id="docs-give-up-example",
        ),
        pytest.param(
            {
                "max_requeue_delay": 0,
                "backoff_multiplier": 100_000,
                "max_backoff_duration": 150_000,
            },
            1,
            ["at once (REQ with no delay: max_requeue_delay=0)", "no backoff (2 x"],
            ["backing off"],
            id="window-over-the-cap",
        ),
    ],
)
def test_the_failure_log_says_what_the_settings_make_of_a_failure(
    options: dict[str, Any], attempts: int, says: list[str], never: list[str]
) -> None:
    said = failure_action(attempts, Config(**options))
    assert all(s in said for s in says), said
    assert not any(n in said for n in never), said


async def test_a_failure_without_delay_or_backoff_is_logged_as_such_and_comes_back_at_once(
    nsqd: NsqdProcess, make_reader: MakeReader, caplog: pytest.LogCaptureFixture
) -> None:
    topic, channel = unique(), unique()
    given_up: list[Message] = []

    def handle(msg: Message) -> None:
        raise RuntimeError("handler failure under test")

    reader = make_reader(
        topic,
        channel,
        nsqd_tcp_addresses=[nsqd.tcp_address],
        message_handler=handle,
        on_giving_up=given_up.append,
        max_attempts=2,
        default_requeue_delay=0,
        max_backoff_duration=0,
    )
    caplog.set_level(logging.ERROR, logger="nsqclient.reader")
    await reader.start()
    await publish(nsqd, topic, [b"poison"])
    await wait_for(lambda: given_up, DEADLINE, "the message to be given up")
    failures = [r.getMessage() for r in caplog.records if "handler failed" in r.getMessage()]
    assert len(failures) == 2
    assert all("requeueing it at once" in f and "no backoff" in f for f in failures), failures
    assert "next delivery is given up (max_attempts=2)" in failures[1]
    assert reader.stats()["in_backoff"] is False
    await reader.graceful_close()
    assert channel_stats(nsqd, topic, channel)["requeue_count"] == 2
