"""Command semantics on real nsqd 1.3.0: SUB, PUB, MPUB, DPUB, RDY as a window, FIN, REQ,
TOUCH, CLS, heartbeats. Waits are deadlines on events or on /stats, never fixed sleeps."""

from __future__ import annotations

import time

import pytest
from nsqd_support import channel_stats, options, unique, wait_channel

from nsqclient import errors
from nsqclient.message import Message
from nsqclient.protocol import CLOSE_WAIT, HEARTBEAT, OK, ErrorFrame, commands
from nsqclient.testing.daemons import NsqdProcess
from tests.rawconn_support import RawConnection
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)


def consumer(
    nsqd: NsqdProcess, topic: str, channel: str = "ch", rdy: int = 1, **kw: object
) -> RawConnection:
    conn = RawConnection.connect(nsqd.tcp_address, options(**kw))  # type: ignore[arg-type]
    assert conn.command(commands.sub(topic, channel)) is OK
    if rdy:
        conn.send(commands.rdy(rdy))
    return conn


def producer(nsqd: NsqdProcess) -> RawConnection:
    return RawConnection.connect(nsqd.tcp_address, options())


def test_pub_then_sub_gets_the_backlog(nsqd: NsqdProcess) -> None:
    # a topic with no channel keeps its messages; the first channel receives them
    topic = unique()
    with producer(nsqd) as pub:
        assert pub.command(commands.pub(topic, b"early")) is OK
    with consumer(nsqd, topic) as sub:
        msg = sub.read_message()
        assert msg.body == b"early" and msg.attempts == 1
        sub.send(commands.fin(msg.id))
        wait_channel(nsqd, topic, "ch", in_flight_count=0, depth=0)


def test_publish_on_a_subscribed_connection(nsqd: NsqdProcess) -> None:
    topic, other = unique(), unique()
    with consumer(nsqd, topic, rdy=0) as conn:
        assert conn.command(commands.pub(other, b"x")) is OK
        assert conn.command(commands.mpub(other, [b"a", b"b"])) is OK
        assert conn.command(commands.dpub(other, 10, b"c")) is OK


def test_message_fields(nsqd: NsqdProcess) -> None:
    topic = unique()
    with consumer(nsqd, topic) as sub, producer(nsqd) as pub:
        before = time.time_ns()
        assert pub.command(commands.pub(topic, b"\x00binary\xff\n")) is OK
        msg = sub.read_message()
        after = time.time_ns()
        # timestamp: nanoseconds since the epoch when nsqd took the message
        assert before - 1_000_000_000 <= msg.timestamp <= after + 1_000_000_000
        assert msg.body == b"\x00binary\xff\n"
        assert msg.attempts == 1
        assert len(msg.id) == 16
        sub.send(commands.fin(msg.id))


def test_mpub_delivers_every_message(nsqd: NsqdProcess) -> None:
    topic = unique()
    bodies = [b"m%d" % i for i in range(50)] + ["unicode \u00e9".encode(), b"x" * 100_000]
    with consumer(nsqd, topic, rdy=100) as sub, producer(nsqd) as pub:
        assert pub.command(commands.mpub(topic, bodies)) is OK
        got: list[Message] = []
        while len(got) < len(bodies):
            msg = sub.read_message()
            got.append(msg)
            sub.send(commands.fin(msg.id))
        assert sorted(m.body for m in got) == sorted(bodies)
        assert len({m.id for m in got}) == len(bodies)
        wait_channel(nsqd, topic, "ch", in_flight_count=0, depth=0, message_count=len(bodies))


def test_dpub_is_deferred_then_delivered(nsqd: NsqdProcess) -> None:
    topic = unique()
    with consumer(nsqd, topic) as sub, producer(nsqd) as pub:
        # a long deferral: nsqd parks it (deferred_count) and does not deliver it
        assert pub.command(commands.dpub(topic, 3_600_000, b"much later")) is OK
        stats = wait_channel(nsqd, topic, "ch", deferred_count=1)
        assert stats["depth"] == 0 and stats["in_flight_count"] == 0
        # a short deferral: delivered, and never before its time
        assert pub.command(commands.dpub(topic, 500, b"soon")) is OK
        msg = sub.read_message(timeout=15)
        arrived = time.time_ns()
        assert msg.body == b"soon"
        assert arrived - msg.timestamp >= 500_000_000  # "not before": a lower bound only
        sub.send(commands.fin(msg.id))
        stats = wait_channel(nsqd, topic, "ch", deferred_count=1, in_flight_count=0)
        assert stats["depth"] == 0  # the long one is still parked


def test_dpub_zero_is_an_ordinary_publish(nsqd: NsqdProcess) -> None:
    topic = unique()
    with consumer(nsqd, topic) as sub, producer(nsqd) as pub:
        assert pub.command(commands.dpub(topic, 0, b"now")) is OK
        assert sub.read_message().body == b"now"


def test_rdy_is_a_window_not_a_counter(nsqd: NsqdProcess) -> None:
    topic = unique()
    with consumer(nsqd, topic, rdy=0) as sub, producer(nsqd) as pub:
        assert pub.command(commands.mpub(topic, [b"%d" % i for i in range(5)])) is OK
        wait_channel(nsqd, topic, "ch", depth=5)
        sub.send(commands.rdy(2))
        first, second = sub.read_message(), sub.read_message()
        # exactly two in flight, three waiting, and it stays that way until a FIN
        wait_channel(
            nsqd, topic, "ch", in_flight_count=2, depth=3,
            client={"ready_count": 2, "in_flight_count": 2},
        )  # fmt: skip
        sub.send(commands.fin(first.id))
        third = sub.read_message()
        # RDY is not decremented by deliveries
        wait_channel(nsqd, topic, "ch", in_flight_count=2, depth=2, client={"ready_count": 2})
        # RDY 0 pauses: FINs free slots but nothing new comes
        sub.send(commands.rdy(0))
        sub.send(commands.fin(second.id))
        sub.send(commands.fin(third.id))
        wait_channel(
            nsqd, topic, "ch", in_flight_count=0, depth=2,
            client={"ready_count": 0, "finish_count": 3},
        )  # fmt: skip
        # lowering RDY below in-flight revokes nothing; raising it resumes
        sub.send(commands.rdy(5))
        rest = [sub.read_message(), sub.read_message()]
        assert sorted(m.body for m in [first, second, third, *rest]) == [
            b"0",
            b"1",
            b"2",
            b"3",
            b"4",
        ]


def test_req_redelivers_with_attempts_plus_one(nsqd: NsqdProcess) -> None:
    topic = unique()
    with consumer(nsqd, topic) as sub, producer(nsqd) as pub:
        assert pub.command(commands.pub(topic, b"again")) is OK
        msg = sub.read_message()
        assert msg.attempts == 1
        sub.send(commands.req(msg.id, 0))
        again = sub.read_message()
        assert (again.id, again.body, again.attempts) == (msg.id, b"again", 2)
        assert again.timestamp == msg.timestamp  # kept across requeues
        sub.send(commands.req(again.id, 0))
        third = sub.read_message()
        assert third.attempts == 3
        sub.send(commands.fin(third.id))
        wait_channel(
            nsqd, topic, "ch", in_flight_count=0, depth=0, requeue_count=2,
            client={"requeue_count": 2, "finish_count": 1},
        )  # fmt: skip


def test_req_with_delay_defers(nsqd: NsqdProcess) -> None:
    topic = unique()
    with consumer(nsqd, topic) as sub, producer(nsqd) as pub:
        assert pub.command(commands.pub(topic, b"later")) is OK
        msg = sub.read_message()
        sub.send(commands.req(msg.id, 3_600_000))
        stats = wait_channel(nsqd, topic, "ch", deferred_count=1, in_flight_count=0, depth=0)
        assert stats["requeue_count"] == 1
        # a short delay comes back, not before its time
        assert pub.command(commands.pub(topic, b"shortly")) is OK
        short = sub.read_message()
        requeued_at = time.monotonic()
        sub.send(commands.req(short.id, 300))
        back = sub.read_message(timeout=15)
        assert time.monotonic() - requeued_at >= 0.3
        assert (back.id, back.attempts) == (short.id, 2)


def test_req_above_max_req_timeout_is_clamped_not_refused(nsqd: NsqdProcess) -> None:
    topic = unique()
    with consumer(nsqd, topic) as sub, producer(nsqd) as pub:
        assert pub.command(commands.pub(topic, b"x")) is OK
        msg = sub.read_message()
        sub.send(commands.req(msg.id, 10 * 3_600_000))
        wait_channel(nsqd, topic, "ch", deferred_count=1)
        # the connection is fine: nothing but OK comes back for the next publish
        assert sub.command(commands.pub(unique(), b"y")) is OK


def wait_until_scanned(sub: RawConnection, pub: RawConnection, topic: str) -> None:
    """Return once nsqd's queue scanner covers this channel.

    nsqd checks deferred and in-flight timeouts every 100 ms, but only for the channels in its
    scanner's list, which it refreshes every 5 s (QueueScanRefreshInterval). Until then a new
    channel's timeouts do not fire at all. A deferred message coming back proves the channel is
    scanned, so timing-based checks after this are meaningful.
    """
    assert pub.command(commands.dpub(topic, 1, b"scanner probe")) is OK
    probe = sub.read_message(timeout=15)
    assert probe.body == b"scanner probe"
    sub.send(commands.fin(probe.id))


def test_touch_extends_beyond_msg_timeout(nsqd: NsqdProcess) -> None:
    topic, elsewhere = unique(), unique()
    with consumer(nsqd, topic, msg_timeout=2000) as sub, producer(nsqd) as pub:
        wait_until_scanned(sub, pub, topic)  # else no timeout could fire, touched or not
        assert pub.command(commands.pub(topic, b"slow work")) is OK
        msg = sub.read_message()
        received = time.monotonic()
        # keep it alive for over twice its 2 s timeout, touching every 100 ms (a stall of almost
        # 2 s would be needed to lose it); meanwhile nothing may arrive: no redelivery, no error
        while time.monotonic() - received < 4.5:
            sub.send(commands.touch(msg.id))
            sub.expect_silence(0.1)
        sub.send(commands.fin(msg.id))
        # FIN succeeded: the next reply on this connection is the OK, not an E_FIN_FAILED
        assert sub.command(commands.pub(elsewhere, b"x")) is OK
        stats = wait_channel(
            nsqd, topic, "ch", in_flight_count=0, depth=0,
            client={"finish_count": 2},  # the probe and this one
        )  # fmt: skip
        assert stats["timeout_count"] == 0


def test_without_touch_the_message_times_out_and_comes_back(nsqd: NsqdProcess) -> None:
    # the control for the TOUCH test: same timeout, no touches
    topic = unique()
    with consumer(nsqd, topic, msg_timeout=2000) as sub, producer(nsqd) as pub:
        wait_until_scanned(sub, pub, topic)
        assert pub.command(commands.pub(topic, b"forgotten")) is OK
        msg = sub.read_message()
        again = sub.read_message(timeout=15)
        assert (again.id, again.attempts) == (msg.id, 2)
        stats = channel_stats(nsqd, topic, "ch")
        assert stats is not None and stats["timeout_count"] == 1
        sub.send(commands.fin(again.id))


def test_cls_gets_close_wait_and_fin_still_works(nsqd: NsqdProcess) -> None:
    topic = unique()
    with consumer(nsqd, topic, rdy=5) as sub, producer(nsqd) as pub:
        assert pub.command(commands.pub(topic, b"in flight at close")) is OK
        msg = sub.read_message()
        sub.send(commands.cls())
        event, skipped = sub.read_until(lambda e: e is CLOSE_WAIT)
        assert event is CLOSE_WAIT and skipped == []
        # closing (state 4), RDY forced to 0
        wait_channel(nsqd, topic, "ch", in_flight_count=1, client={"state": 4, "ready_count": 0})
        # RDY is silently ignored now; FIN still works
        sub.send(commands.rdy(5))
        sub.send(commands.fin(msg.id))
        assert sub.command(commands.pub(unique(), b"still open")) is OK
        wait_channel(nsqd, topic, "ch", in_flight_count=0, client={"ready_count": 0})
        assert pub.command(commands.pub(topic, b"not for the closing client")) is OK
        wait_channel(nsqd, topic, "ch", depth=1)
        # a second CLS is refused, fatally
        sub.send(commands.cls())
        assert sub.expect_closed() == [ErrorFrame("E_INVALID cannot CLS in current state")]


def test_heartbeats_answered_with_nop_keep_the_connection(nsqd: NsqdProcess) -> None:
    # heartbeat_interval is not echoed in the IDENTIFY reply; heartbeats arriving well within
    # nsqd's 30 s default show it was honoured
    with RawConnection.connect(nsqd.tcp_address, options(heartbeat_interval=1000)) as conn:
        start = time.monotonic()
        beats = 0
        while beats < 4:  # four intervals: twice what nsqd allows a silent client
            event = conn.read_event(timeout=10)
            assert event is HEARTBEAT
            beats += 1
            conn.send(commands.nop())
        assert time.monotonic() - start > 2.0
        assert conn.command(commands.pub(unique(), b"alive")) is OK


def test_auto_answered_heartbeats(nsqd: NsqdProcess) -> None:
    topic = unique()
    with consumer(nsqd, topic, heartbeat_interval=1000) as sub, producer(nsqd) as pub:
        sub.answer_heartbeats = True

        def three_answered() -> bool:
            if sub.heartbeats_seen >= 3:
                return True
            with pytest.raises(errors.NSQTimeoutError):  # reading is what answers them
                sub.read_event(timeout=0.5)
            return False

        wait_until(three_answered, 20, "three heartbeats answered", every=0)
        assert pub.command(commands.pub(topic, b"after heartbeats")) is OK
        assert sub.read_message().body == b"after heartbeats"


def test_unanswered_heartbeats_close_the_connection(nsqd: NsqdProcess) -> None:
    with RawConnection.connect(nsqd.tcp_address, options(heartbeat_interval=1000)) as conn:
        events = conn.expect_closed(timeout=15)
    # closed without an error frame, after at least one unanswered heartbeat
    assert events and all(e is HEARTBEAT for e in events)


def test_sub_refused_with_heartbeats_disabled(nsqd: NsqdProcess) -> None:
    with RawConnection.connect(nsqd.tcp_address, options(heartbeat_interval=-1)) as conn:
        conn.send(commands.sub(unique(), "ch"))
        assert conn.expect_closed() == [ErrorFrame("E_INVALID cannot SUB with heartbeats disabled")]


def test_each_channel_gets_a_copy(nsqd: NsqdProcess) -> None:
    topic = unique()
    with consumer(nsqd, topic, "a") as a, consumer(nsqd, topic, "b") as b, producer(nsqd) as pub:
        assert pub.command(commands.pub(topic, b"fan out")) is OK
        ma, mb = a.read_message(), b.read_message()
        assert ma.body == mb.body == b"fan out"
        assert ma.id == mb.id
        a.send(commands.fin(ma.id))
        b.send(commands.fin(mb.id))


def test_fin_req_touch_of_someone_elses_message(nsqd: NsqdProcess) -> None:
    topic = unique()
    with (
        consumer(nsqd, topic) as owner,
        consumer(nsqd, topic, rdy=0) as other,
        producer(nsqd) as pub,
    ):
        assert pub.command(commands.pub(topic, b"mine")) is OK
        msg = owner.read_message()
        id_text = msg.id.decode()
        for encode, verb in ((commands.fin, "FIN"), (commands.touch, "TOUCH")):
            other.send(encode(msg.id))
            error = other.read_error()
            assert (
                error.text == f"E_{verb}_FAILED {verb} {id_text} failed client does not own message"
            )
            assert not error.fatal
        other.send(commands.req(msg.id, 0))
        error = other.read_error()
        assert error.text == f"E_REQ_FAILED REQ {id_text} failed client does not own message"
        assert isinstance(error.to_exception(), errors.ReqFailedError)
        owner.send(commands.fin(msg.id))
        assert other.command(commands.pub(unique(), b"still usable")) is OK
