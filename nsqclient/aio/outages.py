"""What an operator sees of a Reader's or Writer's links to nsqd: outages and their ends.

One :class:`Outages` per Reader or Writer keeps, for each nsqd that is down, when the outage began
and how many reconnects failed, so the logs say what happened at a bounded rate:

* the connection loss itself is one WARNING, from the connection (address and cause);
* the first failed (re)connect of an outage is a WARNING; later ones are DEBUG, with one more
  WARNING at most every :data:`REPEAT_WARNING_AFTER` seconds while the outage lasts;
* the end of an outage is one INFO with its length and the number of failed attempts.

It also warns once per client when an AUTH secret went over a connection without TLS.
"""

from __future__ import annotations

import logging
import time

from ..addresses import Address, format_address
from .connection import Connection

__all__ = ["REPEAT_WARNING_AFTER", "Outages"]

#: seconds between two WARNINGs about the same continuing outage
REPEAT_WARNING_AFTER = 60.0


class _Outage:
    __slots__ = ("failures", "last_warning", "started")

    def __init__(self, started: float) -> None:
        self.started = started
        self.failures = 0
        self.last_warning: float | None = None


class Outages:
    """Outage bookkeeping and logging for one client (``role``: "reader" or "writer")."""

    def __init__(self, log: logging.Logger, role: str) -> None:
        self._log = log
        self._role = role
        self._down: dict[Address, _Outage] = {}
        self._warned_plaintext_auth = False
        self.losses = 0  # connections lost (not closed on purpose)
        self.reconnects = 0  # outages that ended with a connection
        #: the same two counts per nsqd (``host:port``), for per-node metrics
        self.losses_by: dict[str, int] = {}
        self.reconnects_by: dict[str, int] = {}

    def lost(self, addr: Address) -> None:
        """A connection to ``addr`` went away without us closing it (the connection has logged
        the WARNING with its cause): an outage begins."""
        self.losses += 1
        where = format_address(*addr)
        self.losses_by[where] = self.losses_by.get(where, 0) + 1
        self._down.setdefault(addr, _Outage(time.monotonic()))

    def failed(self, addr: Address, exc: BaseException, retry_in: float | None = None) -> None:
        """A connect or reconnect to ``addr`` failed."""
        now = time.monotonic()
        outage = self._down.setdefault(addr, _Outage(now))
        outage.failures += 1
        where = format_address(*addr)
        retry = f"; retrying in up to {retry_in:.1f}s" if retry_in is not None else ""
        if outage.last_warning is None:
            outage.last_warning = now
            self._log.warning(
                "%s cannot connect to nsqd %s: %s; retrying in the background",
                self._role,
                where,
                exc,
            )
        elif now - outage.last_warning >= REPEAT_WARNING_AFTER:
            outage.last_warning = now
            self._log.warning(
                "%s still cannot connect to nsqd %s after %d attempts over %.0fs: %s%s",
                self._role,
                where,
                outage.failures,
                now - outage.started,
                exc,
                retry,
            )
        else:
            self._log.debug("%s reconnect to nsqd %s failed: %s%s", self._role, where, exc, retry)

    def connected(self, addr: Address, conn: Connection) -> bool:
        """A connection to ``addr`` is up: end its outage, if it had one (True: it had, and the
        INFO line saying so is logged)."""
        outage = self._down.pop(addr, None)
        if outage is not None:
            self.reconnects += 1
            where = format_address(*addr)
            self.reconnects_by[where] = self.reconnects_by.get(where, 0) + 1
            self._log.info(
                "%s connected to nsqd %s again after an outage of %.1fs (%d failed attempts)",
                self._role,
                conn.address,
                time.monotonic() - outage.started,
                outage.failures,
            )
        if (
            not self._warned_plaintext_auth
            and conn.auth_response is not None
            and conn.identify_response is not None
            and not conn.identify_response.tls_v1
        ):
            self._warned_plaintext_auth = True
            self._log.warning(
                "%s sent its AUTH secret to nsqd %s without TLS: anyone on the path can read "
                "it; set tls_v1=True (nsqd --tls-cert/--tls-key) to protect it",
                self._role,
                conn.address,
            )
        return outage is not None

    def forget(self, addr: Address) -> None:
        """``addr`` is no longer a node of this client (lookupd dropped it)."""
        self._down.pop(addr, None)

    @property
    def down(self) -> list[str]:
        """The nsqd addresses in an outage now."""
        return [format_address(*addr) for addr in self._down]
