"""Every tunable of a Reader or Writer, validated once, in one frozen object.

Option names are nsqd's and go-nsq's. **Every duration option is in milliseconds**, the unit of the
wire and of go-nsq's and asyncnsq's integer options (``heartbeat_interval=30000``); a
``datetime.timedelta`` is accepted too and converted here, the one place units change. Arguments
named ``timeout`` on methods (``graceful_close(timeout=...)``, ``pub(..., timeout=...)``) are in
seconds, as everywhere in asyncio.

IDENTIFY fields are checked against nsqd's ranges by
:class:`nsqclient.protocol.identify.IdentifyOptions`, which Readers and Writers build from a Config
when they are created, so a bad value fails before any connection is attempted.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from .errors import ConfigError

if TYPE_CHECKING:
    import ssl

__all__ = [
    "Config",
    "ConfigError",
    "Duration",
    "Durations",
    "default_client_id",
    "default_user_agent",
]

Duration = int | float | timedelta
BackoffStrategy = Literal["exponential", "full_jitter"]
RdyStrategy = Literal["adaptive", "even"]


def default_client_id() -> str:
    """The short host name, as go-nsq sends it."""
    return os.uname().nodename.split(".", 1)[0]


def default_user_agent() -> str:
    from . import __version__

    return f"nsqclient/{__version__}"


# name -> (min, max) in milliseconds, inclusive; None means unbounded on that side.
_DURATION_BOUNDS: dict[str, tuple[float | None, float | None]] = {
    "dial_timeout": (1, None),
    "read_timeout": (100, 300_000),
    "write_timeout": (100, 300_000),
    "lookupd_poll_interval": (1_000, 300_000),
    "lookupd_poll_timeout": (1, None),
    "default_requeue_delay": (0, 3_600_000),
    "max_requeue_delay": (0, 3_600_000),
    "backoff_multiplier": (0, 3_600_000),
    "max_backoff_duration": (0, 3_600_000),
    "low_rdy_idle_timeout": (1_000, 300_000),
    "low_rdy_timeout": (1_000, 300_000),
    "rdy_redistribute_interval": (1, 5_000),
    "reconnect_delay": (1, None),
    "max_reconnect_delay": (1, None),
    "publish_timeout": (1, None),
    "close_timeout": (0, None),
}

# name -> the smallest value (ms) that is plausible: a positive value below it is far more likely
# seconds (pynsq's unit, and go-nsq's "1s" read as a number) than milliseconds, so it is refused
# with the value a thousand times larger as the hint. A timedelta is explicit and never doubted.
_SECONDS_LIKELY_BELOW: dict[str, float] = {
    "dial_timeout": 100,
    "publish_timeout": 100,
    "close_timeout": 100,
    "lookupd_poll_timeout": 100,
    "reconnect_delay": 10,
    "max_reconnect_delay": 10,
    "max_backoff_duration": 1_000,
    # pynsq's requeue_delay is 90 (seconds) and its cap 900: either, read as ms, is a retry storm
    "default_requeue_delay": 1_000,
    "max_requeue_delay": 1_000,
}

# Other clients' option names (pynsq's, go-nsq's) -> what to write here; checked before the
# spelling suggestion, which would point a port at the wrong option (requeue_delay is closest
# to max_requeue_delay by spelling, but means default_requeue_delay).
_FOREIGN_OPTIONS: dict[str, str] = {
    "requeue_delay": "pynsq's requeue_delay (seconds) is default_requeue_delay here, in "
    "milliseconds: write default_requeue_delay={ms}",
    "max_tries": "pynsq's max_tries is max_attempts here",
    "lookupd_request_timeout": "pynsq's lookupd_request_timeout (seconds) is "
    "lookupd_poll_timeout here, in milliseconds: write lookupd_poll_timeout={ms}",
    "lookupd_connect_timeout": "pynsq's lookupd_connect_timeout (seconds) is covered by "
    "lookupd_poll_timeout here, in milliseconds: write lookupd_poll_timeout={ms}",
    "message_handler": "a SyncReader takes its handler in reader.run(handler) (or iterate "
    "it: for msg in reader); the asyncio Reader takes message_handler=",
}

# TLS options that mean nothing unless tls_v1 is on: given alone they would connect in plaintext.
_TLS_OPTIONS = (
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
    "tls_server_hostname",
    "tls_min_version",
    "tls_context",
)

# IDENTIFY durations: ranges are nsqd's and checked by IdentifyOptions; here only the type.
_WIRE_DURATIONS = ("heartbeat_interval", "output_buffer_timeout", "msg_timeout")


@dataclasses.dataclass(frozen=True, slots=True)
class Durations:
    """Every duration option as a plain float in one unit: ``config.sec`` (seconds, for asyncio
    timers) or ``config.msec`` (milliseconds, the wire's unit). Attributes, not a name passed
    as a string, so a misspelt option fails type-checking."""

    dial_timeout: float
    read_timeout: float
    write_timeout: float
    lookupd_poll_interval: float
    lookupd_poll_timeout: float
    default_requeue_delay: float
    max_requeue_delay: float
    backoff_multiplier: float
    max_backoff_duration: float
    low_rdy_idle_timeout: float
    low_rdy_timeout: float
    rdy_redistribute_interval: float
    reconnect_delay: float
    max_reconnect_delay: float
    publish_timeout: float
    close_timeout: float
    heartbeat_interval: float
    output_buffer_timeout: float
    msg_timeout: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """Options shared by Readers and Writers of both faces, validated when created.

    Durations are milliseconds (or ``datetime.timedelta``); sizes are bytes. Readers and Writers
    take the fields as keyword arguments too, through :meth:`from_options`, which refuses an
    unknown name with ``ConfigError`` and a suggestion. Frozen: :meth:`replace` makes a changed,
    re-validated copy. Raises ``ConfigError`` for any value out of range or inconsistent.
    """

    # -- identity and IDENTIFY (sent to nsqd; ranges checked by IdentifyOptions) --
    client_id: str | None = None
    """Shown in nsqd's ``/stats`` and nsqadmin; default: the short host name (go-nsq's)."""
    hostname: str | None = None
    """Shown in nsqd's ``/stats``; default: the full host name."""
    user_agent: str | None = None
    """Shown in nsqd's ``/stats``; default: ``nsqclient/<version>``."""
    feature_negotiation: bool = True
    """Ask for nsqd's JSON IDENTIFY reply. Needed for TLS, compression and AUTH, and to learn
    nsqd's ``max_rdy_count`` and ``msg_timeout``; turn off only for very old servers."""
    heartbeat_interval: Duration = 30_000
    """How often nsqd sends a heartbeat; two missed ones mark the connection dead. Shorter finds a
    dead link sooner at the cost of more idle traffic. ``-1`` disables them (Writers only: nsqd
    refuses SUB without heartbeats), ``0`` takes nsqd's default."""
    output_buffer_size: int = 0
    """Bytes nsqd buffers before writing deliveries to this client (``0``: nsqd's own, 16 KiB;
    ``-1``: unbuffered, every delivery written at once: sub-millisecond latency at low rates, one
    system call per message on both sides under load)."""
    output_buffer_timeout: Duration = 25
    """Longest time nsqd holds buffered deliveries while the client has RDY to spare (``0``:
    nsqd's own, 250 ms; ``-1``: no timed flush). At low rates this, not the network, is the
    latency: 25 (nsqd's minimum) measured p50 13 ms and p99 25 ms where 250 gave 127 ms and
    248 ms; under load the 16 KiB buffer fills first, so drains stay as fast (BENCHMARKS.md,
    latency). nsqd refuses values below its ``--min-output-buffer-timeout`` (25 ms)."""
    sample_rate: int = 0
    """Percent of the channel's messages nsqd delivers to this client (``0``: all of them)."""
    msg_timeout: Duration = 0
    """How long a delivered message may stay unanswered before nsqd redelivers it (``0``: nsqd's
    ``--msg-timeout``, 60 s by default). Longer suits slow handlers; a crashed consumer's
    messages then wait longer before anyone else gets them."""

    # -- TLS, compression, auth --
    tls_v1: bool = False
    """Negotiate TLS. The certificate and host name are verified (system CAs unless
    ``tls_ca_file``); nsqd must be started with ``--tls-cert``/``--tls-key``."""
    tls_ca_file: str | None = None
    """PEM file of the CA that signed nsqd's certificate (a private CA)."""
    tls_cert_file: str | None = None
    """Client certificate (PEM) for nsqd's ``--tls-client-auth-policy``; needs ``tls_key_file``."""
    tls_key_file: str | None = None
    """Private key (PEM) of ``tls_cert_file``."""
    tls_insecure_skip_verify: bool = False
    """Accept any certificate. Development only: it defeats TLS against an active attacker."""
    tls_server_hostname: str | None = None
    """The name to verify nsqd's certificate against, when it is not the address's host."""
    tls_min_version: str | None = None
    """Lowest TLS version accepted, e.g. ``"TLSv1.2"`` or ``"TLSv1.3"`` (default: Python's)."""
    tls_context: ssl.SSLContext | None = None
    """A ready ``ssl.SSLContext``, for anything the options above do not cover."""
    snappy: bool = False
    """Snappy-compress the connection: cheap on CPU, good for text and JSON bodies."""
    deflate: bool = False
    """Deflate-compress the connection: smaller than snappy, more CPU. Not with ``snappy``."""
    deflate_level: int = 6
    """Deflate level, 1 (fast) to 9 (small); ``0`` takes nsqd's default (6)."""
    auth_secret: str | bytes | None = None
    """Sent with AUTH when nsqd has ``--auth-http-address``; use TLS too, or it crosses in clear."""

    # -- transport --
    dial_timeout: Duration = 1_000
    """Time allowed for the TCP connect (and the TLS handshake) to one nsqd. Values below 100 are
    refused as probable seconds."""
    read_timeout: Duration = 60_000
    """Time allowed for a reply to a command (IDENTIFY, SUB, AUTH, CLS) and, with heartbeats off,
    the read deadline of a connection."""
    write_timeout: Duration = 1_000
    """How long nsqd may read nothing of what this client sends before the connection is closed
    as stuck."""
    reconnect_delay: Duration = 500
    """First delay before reconnecting to an nsqd that went away; doubles (jittered) after each
    failure, up to ``max_reconnect_delay``. While publishes wait for a connection, a Writer dials
    at once and then at most once per this delay."""
    max_reconnect_delay: Duration = 2_000
    """Cap of the reconnect delay: a Reader finds a restarted nsqd within about this long. Lower
    finds it sooner, with more attempts while nsqd stays down."""

    # -- sizes (bytes); match your nsqd's --max-msg-size / --max-body-size --
    max_msg_size: int = 1_048_576
    """Largest message body published; larger ones raise ``MessageTooLargeError`` before anything
    is sent. Set it to nsqd's ``--max-msg-size`` (a Writer also learns it from nsqd's refusal)."""
    max_body_size: int = 5_242_880
    """Largest MPUB body (all messages plus framing); set it to nsqd's ``--max-body-size``."""
    max_frame_size: int | None = None
    """Largest frame accepted from nsqd before the connection is closed as broken (default: the
    larger of the two sizes above plus 64)."""

    # -- consumer --
    max_in_flight: int = 1
    """Messages a Reader may hold unanswered at once, **across all nsqd**: the RDY budget.
    Higher means more throughput and more messages redelivered if the process dies. ``0``
    starts the Reader paused (subscribed, RDY 0: nothing is delivered, a WARNING says so) until
    ``set_max_in_flight(n)``."""
    max_attempts: int = 5
    """Deliveries after which a message is given up: FIN'd and handed to ``on_giving_up``
    (``0``: never give up). Lower stops poison messages sooner."""
    lookupd_poll_interval: Duration = 60_000
    """How often a Reader or Writer asks nsqlookupd which nsqd carry the topic. Shorter finds new
    nsqd sooner, with more queries."""
    lookupd_poll_jitter: float = 0.3
    """Fraction of the poll interval added at random, so many consumers do not poll in step."""
    lookupd_poll_timeout: Duration = 60_000
    """Time allowed for one lookupd HTTP query."""
    default_requeue_delay: Duration = 90_000
    """REQ delay when a handler fails: this times the message's attempts, capped by
    ``max_requeue_delay``. Longer gives a failing dependency time to recover. Values below 1000
    are refused as probable seconds (pynsq's unit); pass a ``timedelta`` for less."""
    max_requeue_delay: Duration = 900_000
    """Cap of the automatic REQ delay (nsqd refuses more than its ``--max-req-timeout``).
    Values below 1000 are refused as probable seconds; pass a ``timedelta`` for less."""
    backoff_strategy: BackoffStrategy = "exponential"
    """How backoff windows grow: ``"exponential"`` (multiplier * 2^level) or ``"full_jitter"``
    (a random window up to that)."""
    backoff_multiplier: Duration = 1_000
    """Unit of the backoff window after handler failures (``0`` disables backoff)."""
    max_backoff_duration: Duration = 120_000
    """Longest backoff window (``0`` disables backoff). Longer protects a struggling dependency,
    at the cost of a slower recovery."""
    low_rdy_idle_timeout: Duration = 10_000
    """With more nsqd than ``max_in_flight``: a connection idle this long gives its RDY up to
    one that waits."""
    low_rdy_timeout: Duration = 30_000
    """With more nsqd than ``max_in_flight``: a connection holding RDY this long gives it up even
    when busy, so no nsqd starves."""
    rdy_redistribute_interval: Duration = 5_000
    """How often RDY is moved between connections in that case (``rdy_strategy="even"``, and
    the backoff test message with either strategy)."""
    rdy_strategy: RdyStrategy = "adaptive"
    """How ``max_in_flight`` is shared across nsqd. ``"adaptive"``: nsqd that deliver get the
    budget, idle ones keep RDY 1 (or take fast turns at it) to notice new messages; a drained
    nsqd is noticed one output buffer timeout plus two round trips after it falls silent
    (docs/concepts.md). ``"even"``: go-nsq's ``max_in_flight // connections`` each, RDY-1
    turns every ``rdy_redistribute_interval`` when there are more nsqd than ``max_in_flight``."""
    close_timeout: Duration = 30_000
    """Default of ``graceful_close()``: how long running handlers get to finish (Reader) or
    outstanding publishes to be acknowledged (Writer) before the rest is requeued or fails."""

    # -- producer --
    publish_timeout: Duration = 10_000
    """Longest time a publish may take from the call to nsqd's acknowledgement, waiting for a
    connection included; then it raises. Values below 100 are refused as probable seconds."""
    max_pending_publishes: int = 8_192
    """Publishes a Writer keeps unacknowledged before callers wait (backpressure). Higher absorbs
    bursts; lower bounds memory and what is in doubt when a connection drops."""

    def __post_init__(self) -> None:
        for name, least in _SECONDS_LIKELY_BELOW.items():
            value = getattr(self, name)
            explicit = isinstance(value, timedelta | bool) or not isinstance(value, int | float)
            if not explicit and 0 < value < least:
                raise ConfigError(
                    f"{name}={value!r} looks like seconds, but durations are milliseconds: "
                    f"did you mean {name}={value * 1000:g}? (or pass a datetime.timedelta)"
                )
        for name in (*_DURATION_BOUNDS, *_WIRE_DURATIONS):
            object.__setattr__(self, name, _to_ms(name, getattr(self, name)))
        for name, (lo, hi) in _DURATION_BOUNDS.items():
            _check_range(name, getattr(self, name), lo, hi, unit=" ms")
        for name in (
            "feature_negotiation",
            "tls_v1",
            "tls_insecure_skip_verify",
            "snappy",
            "deflate",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for name in (
            "output_buffer_size",
            "sample_rate",
            "deflate_level",
            "max_msg_size",
            "max_body_size",
            "max_in_flight",
            "max_attempts",
            "max_pending_publishes",
        ):
            _check_int(name, getattr(self, name))
        _check_range("max_in_flight", self.max_in_flight, 0, None)
        _check_range("max_attempts", self.max_attempts, 0, 65_535)
        _check_range("max_msg_size", self.max_msg_size, 1, None, unit=" bytes")
        _check_range("max_body_size", self.max_body_size, 1, None, unit=" bytes")
        _check_range("max_pending_publishes", self.max_pending_publishes, 1, None)
        if self.max_frame_size is not None:
            _check_int("max_frame_size", self.max_frame_size)
            _check_range("max_frame_size", self.max_frame_size, 64, None, unit=" bytes")
        if not 0 <= self.lookupd_poll_jitter <= 1:
            raise ConfigError(
                f"lookupd_poll_jitter must be within 0..1, got {self.lookupd_poll_jitter!r}"
            )
        if self.rdy_strategy not in ("adaptive", "even"):
            raise ConfigError(
                f"rdy_strategy must be 'adaptive' or 'even', got {self.rdy_strategy!r}"
            )
        if self.backoff_strategy not in ("exponential", "full_jitter"):
            raise ConfigError(
                "backoff_strategy must be 'exponential' or 'full_jitter', "
                f"got {self.backoff_strategy!r}"
            )
        if self.snappy and self.deflate:
            raise ConfigError("snappy and deflate cannot both be enabled; nsqd refuses the pair")
        if self.reconnect_delay > self.max_reconnect_delay:  # type: ignore[operator]
            raise ConfigError("reconnect_delay must not exceed max_reconnect_delay")
        if not self.tls_v1:
            given = [name for name in _TLS_OPTIONS if getattr(self, name) is not None]
            if self.tls_insecure_skip_verify:
                given.append("tls_insecure_skip_verify")
            if given:
                raise ConfigError(
                    f"{given[0]} is set but tls_v1 is False, so the connection would be "
                    "plaintext: set tls_v1=True to use TLS, or drop the TLS options"
                )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ConfigError("tls_cert_file and tls_key_file must be given together")
        if self.auth_secret is not None and not isinstance(self.auth_secret, str | bytes):
            raise ConfigError(
                f"auth_secret must be str or bytes, got {type(self.auth_secret).__name__}"
            )
        if self.auth_secret is not None and not self.auth_secret:
            raise ConfigError("auth_secret must not be empty; leave it None to skip AUTH")

    # -- construction helpers --

    @classmethod
    def from_options(cls, config: Config | None = None, /, **options: Any) -> Config:
        """Build a Config from keyword options, refusing unknown names with a suggestion."""
        if options:
            unknown = [k for k in options if k not in _FIELD_NAMES]
            if unknown:
                name = unknown[0]
                close = difflib.get_close_matches(name, _FIELD_NAMES, n=1)
                if name in _FOREIGN_OPTIONS:
                    value = options[name]
                    ms = "..."
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        ms = f"{value * 1000:g}"
                    hint = f": {_FOREIGN_OPTIONS[name].format(ms=ms)}"
                else:
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"unknown option {name!r}{hint}")
        if config is None:
            return cls(**options)
        if not isinstance(config, Config):
            raise ConfigError(f"config must be a nsqclient.Config, got {type(config).__name__}")
        return dataclasses.replace(config, **options) if options else config

    def replace(self, **options: Any) -> Config:
        """A copy with some options changed (validated again)."""
        return Config.from_options(self, **options)

    # -- derived values --

    @property
    def frame_size_limit(self) -> int:
        """The largest frame accepted from nsqd before the connection is closed as broken."""
        if self.max_frame_size is not None:
            return self.max_frame_size
        return max(self.max_msg_size, self.max_body_size) + 64

    @property
    def auth_secret_bytes(self) -> bytes | None:
        """``auth_secret`` as sent on the wire (a ``str`` is UTF-8 encoded)."""
        secret = self.auth_secret
        return secret.encode() if isinstance(secret, str) else secret

    @functools.cached_property
    def msec(self) -> Durations:
        """Every duration option in milliseconds (its stored unit), typed as a float."""
        return Durations(**{name: float(getattr(self, name)) for name in _DURATION_NAMES})

    @functools.cached_property
    def sec(self) -> Durations:
        """Every duration option in seconds, for the asyncio layer's timers."""
        return Durations(**{name: float(getattr(self, name)) / 1000.0 for name in _DURATION_NAMES})

    def ms(self, name: str) -> float:
        """A duration option in milliseconds by name (kept for callers; prefer ``msec``)."""
        return float(getattr(self, name))

    def seconds(self, name: str) -> float:
        """A duration option in seconds by name (kept for callers; prefer ``sec``)."""
        return float(getattr(self, name)) / 1000.0


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(Config))
_DURATION_NAMES = tuple(f.name for f in dataclasses.fields(Durations))


def _to_ms(name: str, value: object) -> float | int:
    if isinstance(value, timedelta):
        return value.total_seconds() * 1000.0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"{name} must be a number of milliseconds or a timedelta, got {type(value).__name__}"
        )
    return value


def _check_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, got {value!r}")


def _check_range(name: str, value: Any, lo: float | None, hi: float | None, unit: str = "") -> None:
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        lo_s = "" if lo is None else f"{lo:g}"
        hi_s = "" if hi is None else f"{hi:g}"
        hint = ""
        if unit == " ms" and lo is not None and 0 < value < lo and value * 1000 >= lo:
            hint = f" (durations are milliseconds: did you mean {value * 1000:g}?)"
        raise ConfigError(f"{name}={value!r} is out of range {lo_s}..{hi_s}{unit}{hint}")
