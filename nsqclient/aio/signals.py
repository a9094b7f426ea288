"""Stop signals: turning SIGTERM into a graceful close, and putting back what was there before.

Process managers (``docker stop``, systemd, Kubernetes) stop a service with SIGTERM and kill it
a grace period later. Python's default for SIGTERM ends the process at once, which leaves every
delivered message in flight at nsqd until its ``msg_timeout``. A consumer that handles SIGTERM
the way it handles Ctrl-C (RDY 0, let running handlers finish, requeue the rest, CLS) hands
everything back instead.

:class:`StopSignals` installs one callback for a set of signals and restores the previous
handlers on :meth:`~StopSignals.restore`, either through the event loop
(``loop.add_signal_handler``: the asyncio Reader) or through :func:`signal.signal` (the blocking
facade, whose loop runs on a background thread where signals never arrive). Both can only be
installed from the main thread, which is where Python delivers signals.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from ..errors import ConfigError

__all__ = ["DEFAULT_STOP_SIGNALS", "StopSignals", "signal_name"]

log = logging.getLogger("nsqclient.reader")

#: what every process manager sends to stop a service (SIGINT is Ctrl-C, handled already)
DEFAULT_STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM,)

_PyHandler = Callable[[int, FrameType | None], Any] | int | None


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _as_signals(signals: Iterable[int]) -> tuple[signal.Signals, ...]:
    result: list[signal.Signals] = []
    for sig in signals:
        if isinstance(sig, bool) or not isinstance(sig, int):
            raise ConfigError(f"stop signals must be signal numbers (signal.SIGTERM), got {sig!r}")
        try:
            result.append(signal.Signals(sig))
        except ValueError:
            raise ConfigError(f"{sig!r} is not a signal on this platform") from None
    return tuple(dict.fromkeys(result))


class StopSignals:
    """One callback installed for some signals; :meth:`restore` puts back the previous handlers.

    ``restore()`` is idempotent. Handlers installed with :func:`signal.signal` can only be
    restored from the main thread; :meth:`restore` elsewhere marks them released instead, and
    the next such signal restores the previous handler and re-delivers itself to it.
    """

    def __init__(self, signals: Iterable[int], callback: Callable[[int], None]) -> None:
        self.signals = _as_signals(signals)
        self._callback = callback
        self._previous: dict[signal.Signals, _PyHandler] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_previous: dict[signal.Signals, asyncio.Handle] = {}
        self._installed = False
        self._released = False

    @property
    def installed(self) -> bool:
        return self._installed

    # ------------------------------------------------------------------ signal.signal

    def install(self) -> StopSignals:
        """Install with :func:`signal.signal` (main thread only); the callback runs in the main
        thread between two bytecodes, so it must only set flags or hand work to another thread."""
        try:
            for sig in self.signals:
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._on_signal)
        except ValueError as exc:  # "signal only works in main thread of the main interpreter"
            self._previous.clear()  # off the main thread nothing could be installed
            raise ConfigError(
                f"stop signals can only be installed from the main thread ({exc}); call this "
                "in the main thread, or stop the reader yourself (stop() or close())"
            ) from None
        self._installed = True
        return self

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self._released:  # restore() was called off the main thread: finish it here
            self._restore_python()
            self._installed = self._released = False
            signal.raise_signal(signum)  # to the previous handler, as if we had never been here
            return
        self._callback(signum)

    def _restore_python(self) -> None:
        """Raises ValueError (restoring nothing) off the main thread."""
        for sig, handler in list(self._previous.items()):
            # None: installed outside Python; the default is the closest we can put back
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
            del self._previous[sig]

    # ------------------------------------------------------------------ event loop

    def install_on_loop(self, loop: asyncio.AbstractEventLoop) -> StopSignals:
        """Install with ``loop.add_signal_handler`` (the loop must run in the main thread); falls
        back to :meth:`install` with a hop to the loop where the loop has no signal support, or
        where its handler table cannot be read (uvloop's is private to its C code): replacing an
        application's loop handler there would lose it for good, since it could not be put back,
        so the Python-level handler goes in front of the loop's instead (restored exactly)."""
        table = getattr(loop, "_signal_handlers", None)  # handlers the application added there
        if not isinstance(table, dict):
            self._callback = _hop_to(loop, self._callback)
            return self.install()
        for sig in self.signals:
            handle = table.get(sig)
            previous = signal.getsignal(sig)
            try:
                loop.add_signal_handler(sig, self._callback, int(sig))
            except NotImplementedError:  # e.g. the Windows proactor loop
                self._restore_loop()
                self._callback = _hop_to(loop, self._callback)
                return self.install()
            except (RuntimeError, ValueError) as exc:
                self._restore_loop()
                raise ConfigError(
                    f"stop signals need the Reader's event loop to run in the main thread "
                    f"({exc}); call stop_on_signals() from the main thread's asyncio.run()"
                ) from None
            self._loop = loop
            self._previous[sig] = previous
            if isinstance(handle, asyncio.Handle):
                self._loop_previous[sig] = handle
        self._installed = True
        return self

    def _restore_loop(self) -> None:
        loop, self._loop = self._loop, None
        previous, self._previous = self._previous, {}
        if loop is None:
            return
        for sig, handler in previous.items():
            try:
                loop.remove_signal_handler(sig)
                handle = self._loop_previous.pop(sig, None)
                if handle is not None and not handle.cancelled():
                    callback: Callable[..., Any] = handle._callback  # type: ignore[attr-defined]
                    loop.add_signal_handler(sig, callback, *handle._args)
                elif handler is not None and getattr(handler, "__module__", "") != (
                    "asyncio.unix_events"  # the loop's own no-op, which it removes itself
                ):
                    signal.signal(sig, handler)
            except (RuntimeError, ValueError, OSError) as exc:  # loop closed, not main thread
                log.debug("could not restore the handler of %s: %s", signal_name(sig), exc)

    # ------------------------------------------------------------------ both

    def restore(self) -> None:
        """Put back the handlers that were there before (idempotent)."""
        if not self._installed:
            return
        self._installed = False
        if self._loop is not None:
            self._restore_loop()
            return
        try:
            self._restore_python()
        except ValueError:  # not the main thread: the next signal finishes the job
            self._installed = True
            self._released = True


def _hop_to(
    loop: asyncio.AbstractEventLoop, callback: Callable[[int], None]
) -> Callable[[int], None]:
    def hop(signum: int) -> None:
        try:
            loop.call_soon_threadsafe(callback, signum)
        except RuntimeError:  # the loop is closed: nothing left to stop
            pass

    return hop
