"""The deadline tests' shared table: the stated margin, the faults, and the bound check.

Every public call that takes a timeout returns or raises within ``timeout + MARGIN(timeout)``
(:func:`bound`: 0.5 s plus 20% of the timeout, generous enough for a busy 2-core machine; the
same figure is stated in docs/configuration.md, "Timeouts and their margin"). The tests in
``tests/*/test_deadlines.py`` (and ``tests/sync/test_publish_deadlines.py``) measure each call
on its own clock (``time.monotonic()`` around it) against a real nsqd (and the embedded one)
behind a :class:`~nsqclient.testing.FaultProxy` doing one of :data:`FAULTS`:

* ``refused``: nothing listens (ECONNREFUSED); the client never connected;
* ``blackholed``: the TCP connect succeeds but nothing is ever forwarded (a stall before the
  handshake: what a dropped route or a hung nsqd looks like); the client never connected;
* ``stalled``: the client is connected, then nothing more is forwarded either way;
* ``slowed``: the client is connected, then both ways trickle at 8 bytes/s;
* ``trickling``: the client is connected, then answers come at 8 bytes/s while requests go
  at full speed (a server that answers slowly: every read gets a byte in time);
* ``cut mid-call``: the client is connected, the link stalls, and 0.15 s into the call every
  connection is cut and new ones refused.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from nsqclient.testing import FaultProxy

#: the stated margin: a call may return this much after its timeout (seconds)
MARGIN_S = 0.5
MARGIN_RATIO = 0.2
#: when the "cut mid-call" fault strikes, after the call began
DURING_AFTER = 0.15
#: bytes per second of the slowed link (each way)
SLOW_RATE = 8.0


def bound(timeout: float) -> float:
    """The longest a call with this timeout may take: timeout + 0.5 s + 20% of the timeout."""
    return timeout + MARGIN_S + MARGIN_RATIO * timeout


def check_bound(elapsed: float, timeout: float, what: str) -> None:
    limit = bound(timeout)
    assert elapsed <= limit, (
        f"{what} took {elapsed:.2f} s: more than its timeout {timeout:g} s plus the margin "
        f"(bound {limit:.2f} s)"
    )


@dataclass(frozen=True)
class Fault:
    """One fault: armed before the call (``warm``: once the client is connected), and with
    ``during``, a second step ``DURING_AFTER`` seconds into the call."""

    name: str
    warm: bool
    arm: Callable[[FaultProxy], object]
    during: Callable[[FaultProxy], object] | None = None


def _cut_and_refuse(proxy: FaultProxy) -> None:
    proxy.refuse()
    proxy.cut()


#: client options for the sync deadline tests: quick reconnects, and a read timeout longer
#: than the calls' timeouts (a call's bound must not depend on it)
SYNC_CLIENT: dict[str, Any] = {
    "heartbeat_interval": 1000,
    "reconnect_delay": 50,
    "max_reconnect_delay": 250,
    "dial_timeout": 300,
    "read_timeout": 3000,
}

FAULTS = [
    Fault("refused", False, lambda p: p.refuse()),
    Fault("blackholed", False, lambda p: p.stall(new_connections=True)),
    Fault("stalled", True, lambda p: p.stall()),
    Fault("slowed", True, lambda p: p.slow(down=SLOW_RATE, up=SLOW_RATE)),
    Fault("trickling", True, lambda p: p.slow(down=SLOW_RATE)),
    Fault("cut mid-call", True, lambda p: p.stall(), _cut_and_refuse),
]
#: the faults a connect (or start) meets: each before the client ever connected
CONNECT_FAULTS = [
    FAULTS[0],
    FAULTS[1],
    Fault("slowed", False, lambda p: p.slow(down=SLOW_RATE, up=SLOW_RATE)),
    Fault("cut mid-call", False, lambda p: p.stall(new_connections=True), _cut_and_refuse),
]
FAULT_IDS = [f.name for f in FAULTS]
CONNECT_FAULT_IDS = [f.name for f in CONNECT_FAULTS]


@contextlib.contextmanager
def during_call(proxy: FaultProxy, fault: Fault) -> Iterator[None]:
    """Run ``fault.during`` (if any) on a timer while the block's call runs."""
    timer = None
    if fault.during is not None:
        timer = threading.Timer(DURING_AFTER, fault.during, (proxy,))
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.join(5)


class Clock:
    """``with Clock() as c: call()`` then ``c.elapsed``: the call's own monotonic time."""

    elapsed = 0.0

    def __enter__(self) -> Clock:
        self._start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self._start
