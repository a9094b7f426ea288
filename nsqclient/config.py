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
import functools
import inspect
import os
from dataclasses import field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

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
    from ._version import __version__

    return f"nsqclient/{__version__}"


@dataclasses.dataclass(frozen=True, slots=True)
class Option:
    """How one Config field is checked, declared beside its default and its docstring.

    ``unit="ms"``: a duration (an int or float of milliseconds, or a ``timedelta``, stored as
    milliseconds); ``"bytes"``: a size. ``lo``/``hi``: the inclusive range (None: unbounded;
    IDENTIFY fields leave their ranges to :class:`~nsqclient.protocol.identify.IdentifyOptions`,
    which checks nsqd's). ``seconds_below``: a positive value under it is refused as probable
    seconds (pynsq's unit, go-nsq's "1s" read as a number), with the value a thousand times
    larger as the hint; a timedelta is explicit and never doubted. ``kind``: the type a
    non-duration field must have (``bool`` or ``int``; None: checked by hand or not at all).
    """

    unit: str | None = None
    lo: float | None = None
    hi: float | None = None
    seconds_below: float | None = None
    kind: type | None = None


def _opt(**spec: Any) -> dict[str, Option]:
    """A field's metadata: its :class:`Option`."""
    return {"option": Option(**spec)}


def _ms(lo: float | None = None, hi: float | None = None, **spec: Any) -> dict[str, Option]:
    """A duration field's metadata (milliseconds, within ``lo..hi``)."""
    return _opt(unit="ms", lo=lo, hi=hi, **spec)


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
    linger: float
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
    feature_negotiation: bool = field(default=True, metadata=_opt(kind=bool))
    """Ask for nsqd's JSON IDENTIFY reply. Needed for TLS, compression and AUTH, and to learn
    nsqd's ``max_rdy_count`` and ``msg_timeout``; turn off only for very old servers."""
    heartbeat_interval: Duration = field(default=30_000, metadata=_ms())
    """How often nsqd sends a heartbeat; two missed ones mark the connection dead. Shorter finds a
    dead link sooner at the cost of more idle traffic. ``-1`` disables them (Writers only: nsqd
    refuses SUB without heartbeats), ``0`` takes nsqd's default."""
    output_buffer_size: int = field(default=0, metadata=_opt(unit="bytes", kind=int))
    """Bytes nsqd buffers before writing deliveries to this client (``0``: nsqd's own, 16 KiB;
    ``-1``: unbuffered, every delivery written at once: sub-millisecond latency at low rates, one
    system call per message on both sides under load)."""
    output_buffer_timeout: Duration = field(default=25, metadata=_ms())
    """Longest time nsqd holds buffered deliveries while the client has RDY to spare (``0``:
    nsqd's own, 250 ms; ``-1``: no timed flush). At low rates this, not the network, is the
    latency: 25 (nsqd's minimum) measured p50 13 ms and p99 25 ms where 250 gave 127 ms and
    248 ms; under load the 16 KiB buffer fills first, so drains stay as fast (BENCHMARKS.md,
    latency). nsqd refuses values below its ``--min-output-buffer-timeout`` (25 ms)."""
    sample_rate: int = field(default=0, metadata=_opt(kind=int))
    """Percent of the channel's messages nsqd delivers to this client (``0``: all of them)."""
    msg_timeout: Duration = field(default=0, metadata=_ms())
    """How long a delivered message may stay unanswered before nsqd redelivers it (``0``: nsqd's
    ``--msg-timeout``, 60 s by default). Longer suits slow handlers; a crashed consumer's
    messages then wait longer before anyone else gets them."""

    # -- TLS, compression, auth --
    tls_v1: bool = field(default=False, metadata=_opt(kind=bool))
    """Negotiate TLS. The certificate and host name are verified (system CAs unless
    ``tls_ca_file``); nsqd must be started with ``--tls-cert``/``--tls-key``."""
    tls_ca_file: str | None = None
    """PEM file of the CA that signed nsqd's certificate (a private CA)."""
    tls_cert_file: str | None = None
    """Client certificate (PEM) for nsqd's ``--tls-client-auth-policy``; needs ``tls_key_file``."""
    tls_key_file: str | None = None
    """Private key (PEM) of ``tls_cert_file``."""
    tls_insecure_skip_verify: bool = field(default=False, metadata=_opt(kind=bool))
    """Accept any certificate. Development only: it defeats TLS against an active attacker."""
    tls_server_hostname: str | None = None
    """The name to verify nsqd's certificate against, when it is not the address's host."""
    tls_min_version: str | None = None
    """Lowest TLS version accepted, e.g. ``"TLSv1.2"`` or ``"TLSv1.3"`` (default: Python's)."""
    tls_context: ssl.SSLContext | None = None
    """A ready ``ssl.SSLContext``, for anything the options above do not cover."""
    snappy: bool = field(default=False, metadata=_opt(kind=bool))
    """Snappy-compress the connection: cheap on CPU, good for text and JSON bodies."""
    deflate: bool = field(default=False, metadata=_opt(kind=bool))
    """Deflate-compress the connection: smaller than snappy, more CPU. Not with ``snappy``."""
    deflate_level: int = field(default=6, metadata=_opt(kind=int))
    """Deflate level, 1 (fast) to 9 (small); ``0`` takes nsqd's default (6)."""
    auth_secret: str | bytes | None = None
    """Sent with AUTH when nsqd has ``--auth-http-address``; use TLS too, or it crosses in clear."""

    # -- transport --
    dial_timeout: Duration = field(default=1_000, metadata=_ms(1, None, seconds_below=100))
    """Time allowed for the TCP connect (and the TLS handshake) to one nsqd. Values below 100 are
    refused as probable seconds."""
    read_timeout: Duration = field(default=60_000, metadata=_ms(100, 300_000))
    """Time allowed for a reply to a command (IDENTIFY, SUB, AUTH, CLS) and, with heartbeats off,
    the read deadline of a connection."""
    write_timeout: Duration = field(default=1_000, metadata=_ms(100, 300_000))
    """How long nsqd may read nothing of what this client sends before the connection is closed
    as stuck."""
    reconnect_delay: Duration = field(default=500, metadata=_ms(1, None, seconds_below=10))
    """First delay before reconnecting to an nsqd that went away; doubles (jittered) after each
    failure, up to ``max_reconnect_delay``. While publishes wait for a connection, a Writer dials
    at once and then at most once per this delay."""
    max_reconnect_delay: Duration = field(default=2_000, metadata=_ms(1, None, seconds_below=10))
    """Cap of the reconnect delay: a Reader finds a restarted nsqd within about this long. Lower
    finds it sooner, with more attempts while nsqd stays down."""

    # -- sizes (bytes); match your nsqd's --max-msg-size / --max-body-size --
    max_msg_size: int = field(default=1_048_576, metadata=_opt(unit="bytes", lo=1, kind=int))
    """Largest message body published; larger ones raise ``MessageTooLargeError`` before anything
    is sent. Set it to nsqd's ``--max-msg-size`` (a Writer also learns it from nsqd's refusal)."""
    max_body_size: int = field(default=5_242_880, metadata=_opt(unit="bytes", lo=1, kind=int))
    """Largest MPUB body (all messages plus framing); set it to nsqd's ``--max-body-size``."""
    max_frame_size: int | None = field(default=None, metadata=_opt(unit="bytes", lo=64, kind=int))
    """Largest frame accepted from nsqd before the connection is closed as broken (default: the
    larger of the two sizes above plus 64)."""

    # -- consumer --
    max_in_flight: int = field(default=1, metadata=_opt(lo=0, kind=int))
    """Messages a Reader may hold unanswered at once, **across all nsqd**: the RDY budget.
    Higher means more throughput and more messages redelivered if the process dies. ``0``
    starts the Reader paused (subscribed, RDY 0: nothing is delivered, a WARNING says so) until
    ``set_max_in_flight(n)``."""
    max_attempts: int = field(default=5, metadata=_opt(lo=0, hi=65_535, kind=int))
    """Deliveries after which a message is given up: FIN'd and handed to ``on_giving_up``
    (``0``: never give up). Lower stops poison messages sooner."""
    lookupd_poll_interval: Duration = field(default=60_000, metadata=_ms(1_000, 300_000))
    """How often a Reader or Writer asks nsqlookupd which nsqd carry the topic. Shorter finds new
    nsqd sooner, with more queries."""
    lookupd_poll_jitter: float = 0.3
    """Fraction of the poll interval added at random, so many consumers do not poll in step."""
    lookupd_poll_timeout: Duration = field(default=60_000, metadata=_ms(1, None, seconds_below=100))
    """Time allowed for one lookupd poll, its tries of up to three lookupd included."""
    # pynsq's requeue_delay is 90 (seconds) and its cap 900: either, read as ms, is a retry storm
    default_requeue_delay: Duration = field(
        default=90_000, metadata=_ms(0, 3_600_000, seconds_below=1_000)
    )
    """REQ delay when a handler fails: this times the message's attempts, capped by
    ``max_requeue_delay``. Longer gives a failing dependency time to recover. Values below 1000
    are refused as probable seconds (pynsq's unit); pass a ``timedelta`` for less."""
    max_requeue_delay: Duration = field(
        default=900_000, metadata=_ms(0, 3_600_000, seconds_below=1_000)
    )
    """Cap of the automatic REQ delay (nsqd refuses more than its ``--max-req-timeout``).
    Values below 1000 are refused as probable seconds; pass a ``timedelta`` for less."""
    backoff_strategy: BackoffStrategy = "exponential"
    """How backoff windows grow: ``"exponential"`` (multiplier * 2^level) or ``"full_jitter"``
    (a random window up to that)."""
    backoff_multiplier: Duration = field(default=1_000, metadata=_ms(0, 3_600_000))
    """Unit of the backoff window after handler failures. ``0`` makes the windows empty (no
    pause, but the Reader still takes one message at a time after a failure until handlers
    succeed); ``max_backoff_duration=0`` turns backoff off."""
    max_backoff_duration: Duration = field(
        default=120_000, metadata=_ms(0, 3_600_000, seconds_below=1_000)
    )
    """Longest backoff window (``0`` disables backoff). Longer protects a struggling dependency,
    at the cost of a slower recovery."""
    low_rdy_idle_timeout: Duration = field(default=10_000, metadata=_ms(1_000, 300_000))
    """With more nsqd than ``max_in_flight``: a connection idle this long gives its RDY up to
    one that waits."""
    low_rdy_timeout: Duration = field(default=30_000, metadata=_ms(1_000, 300_000))
    """With more nsqd than ``max_in_flight``: a connection holding RDY this long gives it up even
    when busy, so no nsqd starves."""
    rdy_redistribute_interval: Duration = field(default=5_000, metadata=_ms(1, 5_000))
    """How often RDY is moved between connections in that case (``rdy_strategy="even"``, and
    the backoff test message with either strategy)."""
    rdy_strategy: RdyStrategy = "adaptive"
    """How ``max_in_flight`` is shared across nsqd. ``"adaptive"``: nsqd that deliver get the
    budget, idle ones keep RDY 1 (or take fast turns at it) to notice new messages; a drained
    nsqd is noticed one output buffer timeout plus two round trips after it falls silent
    (docs/concepts.md). ``"even"``: go-nsq's ``max_in_flight // connections`` each, RDY-1
    turns every ``rdy_redistribute_interval`` when there are more nsqd than ``max_in_flight``."""
    close_timeout: Duration = field(default=30_000, metadata=_ms(0, None, seconds_below=100))
    """Default of ``graceful_close()``: how long running handlers get to finish (Reader) or
    outstanding publishes to be acknowledged (Writer) before the rest is requeued or fails."""

    # -- producer --
    publish_timeout: Duration = field(default=10_000, metadata=_ms(1, None, seconds_below=100))
    """Longest time a publish may take from the call to nsqd's acknowledgement, waiting for a
    connection included; then it raises. Values below 100 are refused as probable seconds."""
    max_pending_publishes: int = field(default=8_192, metadata=_opt(lo=1, kind=int))
    """Publishes a Writer keeps unacknowledged before callers wait (backpressure). Higher absorbs
    bursts; lower bounds memory and what is in doubt when a connection drops."""
    coalesce: bool = field(default=False, metadata=_opt(kind=bool))
    """Writer: send the PUBs to one topic that wait to be written together as one MPUB (nsqd
    stores it for a fraction of the cost of that many PUBs); each caller still gets its own
    acknowledgement or error (docs/concepts.md, "Publish coalescing"). DPUB, MPUB, and a PUB
    while nothing of its topic is on its way, go as they are."""
    linger: Duration = field(default=0, metadata=_ms(0, 1_000))
    """With ``coalesce``: how long the first PUB of a batch waits for others to join it. 0 never
    waits: it groups only the PUBs already queued in the same loop iteration, so a lone caller
    sees no added latency."""

    def __post_init__(self) -> None:
        for name, opt in _SECONDS_LIKELY:  # first: "did you mean seconds" beats "out of range"
            value = getattr(self, name)
            explicit = isinstance(value, timedelta | bool) or not isinstance(value, int | float)
            if not explicit and 0 < value < opt.seconds_below:
                raise ConfigError(
                    f"{name}={value!r} looks like seconds, but durations are milliseconds: "
                    f"did you mean {name}={value * 1000:g}? (or pass a datetime.timedelta)"
                )
        for name in _DURATION_NAMES:
            object.__setattr__(self, name, _to_ms(name, getattr(self, name)))
        for name, opt in _OPTIONS:
            value = getattr(self, name)
            if opt.kind is bool and not isinstance(value, bool):
                raise ConfigError(f"{name} must be True or False, got {value!r}")
            if opt.kind is int and value is not None:
                _check_int(name, value)
        for name, opt in _OPTIONS:
            value = getattr(self, name)
            if (opt.lo is not None or opt.hi is not None) and value is not None:
                unit = f" {opt.unit}" if opt.unit is not None else ""
                _check_range(name, value, opt.lo, opt.hi, unit=unit)
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
                import difflib  # only to word this error

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


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(Config))
#: every field's declared checks, in field order
_OPTIONS: tuple[tuple[str, Option], ...] = tuple(
    (f.name, f.metadata["option"]) for f in dataclasses.fields(Config) if "option" in f.metadata
)
#: the duration options (milliseconds): Durations has one attribute for each (a test keeps it so)
_DURATION_NAMES = tuple(name for name, opt in _OPTIONS if opt.unit == "ms")
_SECONDS_LIKELY = tuple((name, opt) for name, opt in _OPTIONS if opt.seconds_below is not None)
# Derived views, for the docs' option table: range-checked durations -> (min, max) in ms, and
# the IDENTIFY durations whose ranges are nsqd's (checked by IdentifyOptions).
_DURATION_BOUNDS = {
    name: (opt.lo, opt.hi) for name, opt in _OPTIONS if opt.unit == "ms" and opt.lo is not None
}
_WIRE_DURATIONS = tuple(name for name in _DURATION_NAMES if name not in _DURATION_BOUNDS)


_Class = TypeVar("_Class", bound=type)


def lists_options(cls: _Class) -> _Class:
    """Class decorator of the clients: end the docstring with every option, its default and
    unit, so that ``help(SyncWriter)`` shows what ``**options`` takes (its signature says only
    ``Unpack[ConfigOptions]``). The listing is made from :class:`Config` itself, so it never
    drifts; docs/configuration.md has what each option does."""
    cls.__doc__ = f"{inspect.cleandoc(cls.__doc__ or '')}\n\n{_options_listing()}"
    return cls


@functools.cache
def _options_listing() -> str:
    lines = [
        "Options (keyword arguments, or ``config=Config(...)``; what each does and trades: "
        "docs/configuration.md)::",
        "",
    ]
    for f in dataclasses.fields(Config):
        option = f.metadata.get("option")
        unit = option.unit if option is not None and option.unit else ""
        if unit:
            unit = f" ({unit})" if f.default is None else f" {unit}"
        lines.append(f"    {f.name} = {f.default!r}{unit}")
    return "\n".join(lines)


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
