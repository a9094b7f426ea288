"""``wakes.wake_each``: a reading thread wakes every thread its read answered in one pass, and
on the loop thread the bytes wait for the loop's next sleep, as :func:`wakes.wake` does."""

from __future__ import annotations

import asyncio
import threading

import pytest

from nsqclient.sync.wakes import Waker, bind, new_waking_loop, unbind, wake_each

pytestmark = pytest.mark.timeout(120)  # (hang deadlines: the free-threaded step can be slow)


def test_wake_each_wakes_every_thread_at_once_off_the_loop() -> None:
    wakers = [Waker() for _ in range(4)]
    woken: list[bool] = []

    def wait(waker: Waker) -> None:
        woken.append(waker.wait(30.0))

    threads = [threading.Thread(target=wait, args=(w,)) for w in wakers]
    try:
        wake_each(wakers)  # before they wait: the bytes wait for them
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert woken == [True] * 4
        wake_each(wakers)  # a byte left over (a thread that gave up) is no error
        wakers[0].close()
        wake_each(wakers)  # nor is a thread gone (its pair closed)
    finally:
        for w in wakers:
            w.close()


def test_wake_each_on_the_loop_thread_waits_for_its_next_sleep() -> None:
    loop = new_waking_loop()
    waker = Waker()

    async def main() -> tuple[bool, bool]:
        bind(loop)
        wake_each([waker])
        before = waker.wait(0.001)  # still queued: the loop has not slept yet
        await asyncio.sleep(0)  # one iteration: the selector writes the byte, then waits
        return before, waker.wait(30.0)

    try:
        assert loop.run_until_complete(main()) == (False, True)
    finally:
        unbind(loop)
        loop.close()
        waker.close()
