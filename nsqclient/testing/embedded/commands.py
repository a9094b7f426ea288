"""nsqd's V2 commands, checked in nsqd's order with nsqd's exact error texts (``protocol_v2.go``).

:func:`execute` takes the parameters of one command line and returns what the connection must do
next (a :data:`~.bodies.Result`): nothing, a response payload, a *body reader* (see
:mod:`.bodies`), or a coroutine (AUTH, the TLS upgrade, an auth re-query, waiting for a topic's
lookupd channel pre-creation). Any of them may raise :class:`~.wire.ClientError`. A command
works on the client's :class:`~.client.ClientState`, which the connection implements.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Final

from ...protocol.names import is_valid_name
from .bodies import Need, Result, read_mpub_items
from .identify import handle_identify_body
from .topic import Topic
from .wire import ClientError, go_quote, int32_at, parse_base10, to_int64

if TYPE_CHECKING:
    from .client import ClientState

__all__ = ["execute"]

INIT: Final = 0
SUBSCRIBED: Final = 3
CLOSING: Final = 4
OK: Final = b"OK"
_MS: Final = 1_000_000  # nanoseconds per millisecond


def _invalid(text: str | bytes) -> ClientError:
    return ClientError("E_INVALID", text)


def execute(conn: ClientState, params: list[bytes]) -> Result:
    name = params[0]
    if name == b"IDENTIFY":
        return identify(conn, params)
    if conn.nsqd.tls_required and not conn.tls:
        raise _invalid(b"cannot " + name + b" in current state (TLS required)")
    handler = _COMMANDS.get(name)
    if handler is None:
        raise _invalid(b"invalid command " + name)
    return handler(conn, params)


def identify(conn: ClientState, params: list[bytes]) -> Result:
    if conn.state != INIT:
        raise _invalid("cannot IDENTIFY in current state")
    return handle_identify_body(conn)


def auth(conn: ClientState, params: list[bytes]) -> Result:
    if conn.state != INIT:
        raise _invalid("cannot AUTH in current state")
    if len(params) != 1:
        raise _invalid("AUTH invalid number of parameters")
    return _auth_body(conn)


def _auth_body(conn: ClientState) -> Generator[Need, bytes, Result]:
    size = int32_at((yield (4, "E_BAD_BODY", b"AUTH failed to read body size")))
    limit = conn.nsqd.options.max_body_size
    if size > limit:
        raise ClientError("E_BAD_BODY", f"AUTH body too big {size} > {limit}")
    if size <= 0:
        raise ClientError("E_BAD_BODY", f"AUTH invalid body size {size}")
    secret = yield (size, "E_BAD_BODY", b"AUTH failed to read body")
    if conn.has_authorizations():
        raise _invalid("AUTH already set")
    if not conn.nsqd.auth_enabled:
        raise ClientError("E_AUTH_DISABLED", "AUTH disabled")
    return _auth_query(conn, secret)


async def _auth_query(conn: ClientState, secret: bytes) -> Result:
    conn.auth_secret = secret
    await conn.query_auth()
    state = conn.auth_state
    if state is None or not state.authorizations:
        raise ClientError("E_UNAUTHORIZED", "AUTH no authorizations found")
    return json.dumps(
        {
            "identity": state.identity,
            "identity_url": state.identity_url,
            "permission_count": len(state.authorizations),
        },
        separators=(",", ":"),
    ).encode()


def _check_auth(
    conn: ClientState, cmd: str, topic: str, channel: str
) -> Coroutine[Any, Any, None] | None:
    """nsqd's CheckAuth; a coroutine when the cached authorizations expired (re-query)."""
    if not conn.nsqd.auth_enabled:
        return None
    if not conn.has_authorizations():
        raise ClientError("E_AUTH_FIRST", f"AUTH required before {cmd}")
    state = conn.auth_state
    assert state is not None
    if state.expired():
        return _recheck_auth(conn, cmd, topic, channel)
    if not state.is_allowed(topic, channel):
        raise _unauthorized(cmd, topic, channel)
    return None


async def _recheck_auth(conn: ClientState, cmd: str, topic: str, channel: str) -> None:
    await conn.query_auth()
    state = conn.auth_state
    if state is None or not state.is_allowed(topic, channel):
        raise _unauthorized(cmd, topic, channel)


def _unauthorized(cmd: str, topic: str, channel: str) -> ClientError:
    quoted = go_quote(topic.encode()) + b" " + go_quote(channel.encode())
    return ClientError("E_UNAUTHORIZED", f"AUTH failed for {cmd} on ".encode() + quoted)


def _then(pending: Coroutine[Any, Any, None] | None, action: Callable[[], Result]) -> Result:
    if pending is None:
        return action()
    return _after(pending, action)


async def _after(pending: Coroutine[Any, Any, None], action: Callable[[], Result]) -> Result:
    await pending
    return action()


def _with_topic(conn: ClientState, name: str, action: Callable[[Topic], Result]) -> Result:
    """Get or create the topic; wait first if it is still pre-creating channels from lookupd."""
    topic = conn.nsqd.broker.get_topic(name)
    if topic.started:
        return action(topic)
    return _wait_topic(topic, action)


async def _wait_topic(topic: Topic, action: Callable[[Topic], Result]) -> Result:
    await topic.ready
    return action(topic)


def sub(conn: ClientState, params: list[bytes]) -> Result:
    if conn.state != INIT:
        raise _invalid("cannot SUB in current state")
    if conn.heartbeat_interval <= 0:
        raise _invalid("cannot SUB with heartbeats disabled")
    if len(params) < 3:
        raise _invalid("SUB insufficient number of parameters")
    topic_b, channel_b = params[1], params[2]
    if not is_valid_name(topic_b):
        raise ClientError("E_BAD_TOPIC", b"SUB topic name " + go_quote(topic_b) + b" is not valid")
    if not is_valid_name(channel_b):
        raise ClientError(
            "E_BAD_CHANNEL", b"SUB channel name " + go_quote(channel_b) + b" is not valid"
        )
    topic, channel = topic_b.decode(), channel_b.decode()

    def subscribe(t: Topic) -> Result:
        if conn.closed:
            return None
        ch = t.get_channel(channel)
        reason = ch.add_client(conn)
        if reason is not None:
            raise ClientError("E_SUB_FAILED", f"SUB failed {reason}")
        conn.state = SUBSCRIBED
        conn.channel = ch
        return OK

    return _then(
        _check_auth(conn, "SUB", topic, channel), lambda: _with_topic(conn, topic, subscribe)
    )


def rdy(conn: ClientState, params: list[bytes]) -> Result:
    state = conn.state
    if state == CLOSING:
        return None
    if state != SUBSCRIBED:
        raise _invalid("cannot RDY in current state")
    count = 1
    if len(params) > 1:
        parsed = parse_base10(params[1])
        if parsed is None:
            raise _invalid(b"RDY could not parse count " + params[1])
        count = to_int64(parsed)
    limit = conn.nsqd.options.max_rdy_count
    if count < 0 or count > limit:
        raise _invalid(f"RDY count {count} out of range 0-{limit}")
    conn.set_ready_count(count)
    return None


def _message_id(conn: ClientState, cmd: str, params: list[bytes], need: int) -> bytes:
    if conn.state != SUBSCRIBED and conn.state != CLOSING:
        raise _invalid(f"cannot {cmd} in current state")
    if len(params) < need:
        raise _invalid(f"{cmd} insufficient number of params")
    msg_id = params[1]
    if len(msg_id) != 16:
        raise _invalid("invalid message ID")
    return msg_id


def fin(conn: ClientState, params: list[bytes]) -> Result:
    msg_id = _message_id(conn, "FIN", params, 2)
    assert conn.channel is not None
    error = conn.channel.finish(conn.id, msg_id)
    if error is not None:
        raise ClientError("E_FIN_FAILED", b"FIN " + msg_id + b" failed " + error.encode())
    conn.finished_message()
    return None


def req(conn: ClientState, params: list[bytes]) -> Result:
    msg_id = _message_id(conn, "REQ", params, 3)
    parsed = parse_base10(params[2])
    if parsed is None:
        raise _invalid(b"REQ could not parse timeout " + params[2])
    max_ns = conn.nsqd.options.max_req_timeout * _MS
    delay_ns = min(max(to_int64(parsed * _MS), 0), max_ns)
    assert conn.channel is not None
    error = conn.channel.requeue(conn.id, msg_id, delay_ns / 1e9)
    if error is not None:
        raise ClientError("E_REQ_FAILED", b"REQ " + msg_id + b" failed " + error.encode())
    conn.requeued_message()
    return None


def touch(conn: ClientState, params: list[bytes]) -> Result:
    msg_id = _message_id(conn, "TOUCH", params, 2)
    assert conn.channel is not None
    error = conn.channel.touch(conn.id, msg_id, conn.msg_timeout)
    if error is not None:
        raise ClientError("E_TOUCH_FAILED", b"TOUCH " + msg_id + b" failed " + error.encode())
    return None


def cls(conn: ClientState, params: list[bytes]) -> Result:
    if conn.state != SUBSCRIBED:
        raise _invalid("cannot CLS in current state")
    conn.set_ready_count(0)
    conn.state = CLOSING
    return b"CLOSE_WAIT"


def nop(conn: ClientState, params: list[bytes]) -> Result:
    return None


def _topic_param(cmd: bytes, params: list[bytes], need: int, dup: bytes = b"") -> str:
    if len(params) < need:
        raise _invalid(cmd + b" insufficient number of parameters")
    name = params[1]
    if not is_valid_name(name):
        raise ClientError(
            "E_BAD_TOPIC", dup + cmd + b" topic name " + go_quote(name) + b" is not valid"
        )
    return name.decode()


def pub(conn: ClientState, params: list[bytes]) -> Result:
    return _pub_body(conn, b"PUB", _topic_param(b"PUB", params, 2), 0.0)


def dpub(conn: ClientState, params: list[bytes]) -> Result:
    topic = _topic_param(b"DPUB", params, 3)
    parsed = parse_base10(params[2])
    if parsed is None:
        raise _invalid(b"DPUB could not parse timeout " + params[2])
    max_ms = conn.nsqd.options.max_req_timeout
    delay_ns = to_int64(parsed * _MS)
    if delay_ns < 0 or delay_ns > max_ms * _MS:
        raise _invalid(f"DPUB timeout {parsed} out of range 0-{max_ms}")
    return _pub_body(conn, b"DPUB", topic, delay_ns / 1e9)


def _pub_body(
    conn: ClientState, cmd: bytes, topic: str, delay: float
) -> Generator[Need, bytes, Result]:
    size = int32_at((yield (4, "E_BAD_MESSAGE", cmd + b" failed to read message body size")))
    if size <= 0:
        raise ClientError("E_BAD_MESSAGE", cmd + b" invalid message body size %d" % size)
    limit = conn.nsqd.options.max_msg_size
    if size > limit:
        raise ClientError("E_BAD_MESSAGE", cmd + b" message too big %d > %d" % (size, limit))
    body = yield (size, "E_BAD_MESSAGE", cmd + b" failed to read message body")

    def publish(t: Topic) -> Result:
        t.put(conn.nsqd.broker.new_message(body, delay))
        conn.published(topic, 1)
        return OK

    if not conn.nsqd.auth_enabled:
        return _with_topic(conn, topic, publish)
    return _then(
        _check_auth(conn, cmd.decode(), topic, ""), lambda: _with_topic(conn, topic, publish)
    )


def mpub(conn: ClientState, params: list[bytes]) -> Result:
    topic = _topic_param(b"MPUB", params, 2, dup=b"E_BAD_TOPIC ")
    return _then(
        _check_auth(conn, "MPUB", topic, ""),
        lambda: _with_topic(conn, topic, lambda t: _mpub_body(conn, t)),
    )


def _mpub_body(conn: ClientState, topic: Topic) -> Generator[Need, bytes, Result]:
    opts = conn.nsqd.options
    size = int32_at((yield (4, "E_BAD_BODY", b"MPUB failed to read body size")))
    if size <= 0:
        raise ClientError("E_BAD_BODY", f"MPUB invalid body size {size}")
    if size > opts.max_body_size:
        raise ClientError("E_BAD_BODY", f"MPUB body too big {size} > {opts.max_body_size}")
    bodies = yield from read_mpub_items(opts.max_msg_size, opts.max_body_size)
    topic.put_many(conn.nsqd.broker.new_messages(bodies))
    conn.published(topic.name, len(bodies))
    return OK


_COMMANDS: Final[dict[bytes, Callable[[ClientState, list[bytes]], Result]]] = {
    b"FIN": fin,
    b"RDY": rdy,
    b"REQ": req,
    b"PUB": pub,
    b"MPUB": mpub,
    b"DPUB": dpub,
    b"NOP": nop,
    b"TOUCH": touch,
    b"SUB": sub,
    b"CLS": cls,
    b"AUTH": auth,
}
