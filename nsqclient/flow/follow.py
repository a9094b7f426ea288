"""The ``"adaptive"`` RDY policy: the budget follows the messages (pure; used by RdyController).

Each connection is *hot* (it delivered, and has not since fallen silent) or *cold*. nsqd sends at
once while a connection has spare RDY and messages waiting, and flushes its buffer at most
``output_buffer_timeout`` later (at once when in-flight reaches RDY), so a connection that held
spare RDY and stayed silent for its *silence window* (its negotiated output_buffer_timeout plus
two of its observed round trips) has nothing to send: it turns cold. A message turns it hot again.
The round trip is the IDENTIFY one, raised by how long the first delivery after RDY 0 -> n took
(so a loaded nsqd, or a loaded client loop, widens the window instead of looking drained).

::

    max_in_flight = 16, 1 hot nsqd among 6           64 nsqd, max_in_flight 16 (more than budget)
    hot   A  ###############  15                      16 slots of RDY 1 turn round: a slot moves
    cold  B  #  probe (RDY 1)                         on when its holder is silent for one window,
    cold  C-F   wait their turn at the probe          or has held it for two (delivering); freed
                                                      slots go to whoever waited longest

* Nobody hot and every connection fits: go-nsq's even split (``max_in_flight // n`` each).
* Some hot: at most ``max(1, max_in_flight // 16)`` RDY-1 *probes* turn round the cold
  connections (one silence window each); the hot ones share the rest evenly. While probes keep
  finding messages (each within two windows of the last), their number doubles with each find,
  so a fleet of busy nsqd is found in a few rounds: more probes than the budget leaves beside
  the hot means everyone takes turns (below).
* More connections than the budget allows (hot plus probes above ``max_in_flight``): every
  connection takes RDY-1 turns; a delivering holder keeps its slot for ``_TURN`` silence windows
  (the median connection's, the same for all: equal turns are what keeps the shares fair).
  A slot handed on stays unused for one more window (what the holder's nsqd may have sent
  under it is still counted), so a turn lasts at most 3 windows. With ``n`` connections and
  ``k = max_in_flight`` slots every connection gets a turn within ``ceil(n / k)`` turns: the
  first delivery waits at most ``ceil(n / k) * 3 * (output_buffer_timeout + 2 * rtt)`` (64 nsqd,
  k = 16, our 25 ms buffer: 0.33 s; at nsqd's own 250 ms default, 3 s).
* An idle fleet costs (almost) nothing: once no connection has delivered for a while, cold
  turns lengthen with the quiet time (half of it, at most ``_IDLE_TURN_MAX``), so the
  rotation sends a few RDY a second instead of ``2k`` every window; the first message brings
  the fast pace back. The bound above holds while messages flow (a preloaded or busy fleet);
  a message published into a fleet quiet for ``2 * _IDLE_TURN_MAX`` or longer waits at most
  ``ceil(n / k) * (_IDLE_TURN_MAX + 2 windows)`` for its turn (64 nsqd, k = 16: about 4.2 s).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

__all__ = ["ConnState", "plan"]

_PROBE_FRACTION = 16  # while some connections deliver, at most 1/16 of the budget probes the rest
_TURN = 2  # in RDY-1 rotation a delivering connection keeps its slot this many silence windows
_IDLE_PACE = 1 / 2  # a quiet fleet's cold turn lasts this fraction of its quiet time ...
_IDLE_TURN_MAX = 1.0  # ... up to this (s): the trade of idle RDY traffic against discovery


def _zero() -> int:
    return 0


class ConnState:
    """What the controller knows of one connection (shared by both policies)."""

    __slots__ = (
        "hold",
        "hold_until",
        "hot",
        "in_flight",
        "joined",
        "key",
        "last_msg",
        "max_rdy",
        "obt",
        "probe_at",
        "raised_at",
        "rdy",
        "rdy_set_at",
        "response",
        "silence",
        "waiting_since",
    )

    def __init__(
        self,
        key: Hashable,
        max_rdy: int,
        now: float,
        in_flight: Callable[[], int] | None = None,
        obt: float = 0.25,
        rtt: float = 0.0,
    ) -> None:
        self.key = key
        self.max_rdy = max_rdy
        self.rdy = 0
        self.rdy_set_at = now  # when rdy last changed
        self.raised_at = now  # when rdy last grew (a silence window starts there)
        self.waiting_since = now  # when rdy last became 0 (or the connection joined)
        self.joined = now  # a fleet is quiet from its newest join or message on
        self.last_msg = -float("inf")  # never received a message: idle from the start, as go-nsq
        self.hot = False
        self.in_flight = in_flight if in_flight is not None else _zero
        self.obt = obt
        #: how long nsqd takes to answer: the handshake's round trip, raised by what RDY 0 -> n
        #: to the first delivery takes under load (a slow nsqd must not look drained)
        self.response = rtt
        self.probe_at: float | None = None
        self.silence = obt + 2.0 * rtt
        #: after a decrease: how many deliveries nsqd may have sent under the old RDY that have
        #: not arrived yet (arrivals count it down; the first tick a silence window later
        #: ends it)
        self.hold = 0
        self.hold_until = now

    def observed(self, response: float) -> None:
        """The first delivery ``response`` seconds after RDY went up from 0 (an upper bound of
        nsqd's response time when it had messages waiting): the window follows the slowest
        recent one, decaying slowly, growing at most fourfold at a time."""
        self.probe_at = None
        r = self.response * 0.9
        if response > r:  # (a message published long after the RDY is no measure: capped)
            r = min(response, 4.0 * self.silence)
        self.response = r
        self.silence = self.obt + 2.0 * r

    def reserved(self, now: float) -> int:
        """An upper bound of what nsqd may have in flight on this connection: its RDY, or what
        we hold unanswered plus, for a silence window after a decrease, what nsqd may have sent
        under the old RDY that is still on its way."""
        f = self.in_flight() + self.hold  # (holds end only in ticks: see RdyController.tick)
        return f if f > self.rdy else self.rdy


def _rotate(
    pool: list[ConnState],
    slots: int,
    now: float,
    turn: Callable[[ConnState], float],
    ordered: Callable[[list[ConnState], Callable[[ConnState], float]], list[ConnState]],
    targets: dict[ConnState, int],
) -> float | None:
    """Give RDY 1 to ``slots`` of ``pool``: holders whose turn (``turn(c)`` seconds from its
    raise) has not expired keep theirs, the freed slots go to the longest waiting. Returns when
    the next turn expires (None: nobody waits for one)."""
    if slots <= 0:
        for c in pool:
            targets[c] = 0
        return None
    if len(pool) <= slots:
        for c in pool:
            targets[c] = 1
        return None
    keep = [c for c in pool if c.rdy > 0 and c.raised_at + turn(c) > now]
    if len(keep) > slots:  # the budget shrank: the most recently raised keep their slot
        keep = ordered(keep, lambda c: -c.raised_at)[:slots]
    chosen = set(keep)
    rest = [c for c in pool if c not in chosen]
    # just expired holders count as waiting since now: they go to the back of the queue
    for c in ordered(rest, lambda c: now if c.rdy > 0 else c.waiting_since)[: slots - len(keep)]:
        chosen.add(c)
    at: float | None = None
    for c in pool:
        if c in chosen:
            targets[c] = 1
            e = c.raised_at + turn(c) if c.rdy > 0 else now + turn(c)
            if e <= now:
                e = now + c.silence
            if at is None or e < at:
                at = e
        else:
            targets[c] = 0
    return at


def plan(
    conns: list[ConnState],
    budget: int,
    now: float,
    ordered: Callable[[list[ConnState], Callable[[ConnState], float]], list[ConnState]],
    settled: bool = False,
    found: int = 0,
) -> tuple[dict[ConnState, int], float | None]:
    """Targets for every connection outside backoff, and when to look again (None: only on
    the next event). Silence is judged only when ``settled`` (in a tick, which the caller runs
    after reading what its sockets hold: a stalled loop is not a silent nsqd).

    ``found``: how many cold connections in a row turned out to have messages, each within two
    windows of the last (the controller's count, 0 once that stops). The probes double with
    each one found: a fleet of preloaded nsqd is searched in a few rounds, not one
    window per nsqd, while a lone busy nsqd (probes that come back empty) keeps the budget."""
    targets: dict[ConnState, int] = {}
    elig: list[ConnState] = []
    for c in conns:
        if c.max_rdy > 0 and budget > 0:
            elig.append(c)
        elif c.rdy:
            targets[c] = 0
    if not elig:
        return targets, None
    for c in elig if settled else ():  # spare RDY and silence for a whole window: drained
        silent = c.hot and c.rdy > 0 and now - max(c.last_msg, c.raised_at) > c.silence
        if silent and c.in_flight() < c.rdy:
            c.hot = False
    hot = [c for c in elig if c.hot]
    cold = [c for c in elig if not c.hot]
    n = len(elig)
    if not hot and n <= budget:  # nothing to follow: go-nsq's even split
        share = budget // n
        for c in elig:
            targets[c] = min(share, c.max_rdy)
        return targets, None
    probes = len(cold)
    if hot:
        probes = max(1, budget // _PROBE_FRACTION)
        if found:
            probes = max(probes, 1 << min(found, 30))
        probes = min(len(cold), probes)
    idle = 0.0  # how long a cold turn lasts beyond its window while the whole fleet is quiet
    if not hot:
        recent = max(c.last_msg if c.last_msg > c.joined else c.joined for c in elig)
        idle = min((now - recent) * _IDLE_PACE, _IDLE_TURN_MAX)

    rotating = len(hot) + probes > budget  # more connections than slots: everyone takes turns
    # Rotating, a delivering holder's turn is the same length for all (the median window):
    # turns measured in each one's own window would hand an nsqd whose window grew under load
    # (a slow first delivery once) longer turns, so more of the messages. Silence is still
    # judged in each connection's own window.
    shared = sorted(c.silence for c in elig)[n // 2] * _TURN if rotating else 0.0

    def turn(c: ConnState) -> float:
        if c.hot:
            return shared if rotating else c.silence * _TURN
        return c.silence if c.silence > idle else idle

    at: float | None
    if rotating:
        at = _rotate(elig, budget, now, turn, ordered, targets)
        for c in elig:  # a delivering holder also hands its slot on as soon as it drains
            if c.hot and c.rdy > 0 and targets[c] > 0:
                at = _earlier(at, _drain_check(c, now))
        return targets, at
    at = _rotate(cold, probes, now, turn, ordered, targets)
    base, extra = divmod(budget - min(probes, len(cold)), len(hot))
    spare = 0
    for i, c in enumerate(hot):
        want = base + (1 if i < extra else 0)
        if want > c.max_rdy:
            spare += want - c.max_rdy
            want = c.max_rdy
        targets[c] = want
    if spare:  # what capped connections cannot take goes to the others
        for c in hot:
            more = min(spare, c.max_rdy - targets[c])
            if more > 0:
                targets[c] += more
                spare -= more
    if n > 1:
        for c in hot:
            at = _earlier(at, _drain_check(c, now))
    return targets, at


def _drain_check(c: ConnState, now: float) -> float:
    t = max(c.last_msg, c.raised_at) + c.silence
    return t if t > now else now + c.silence


def _earlier(a: float | None, b: float) -> float:
    return b if a is None or b < a else a
