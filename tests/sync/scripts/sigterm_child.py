"""Child process for the SIGTERM tests: consume slowly, print each body once it is handled.

    python sigterm_child.py MODE NSQD_TCP TOPIC CHANNEL

MODE ``run``: ``reader.run(handler, threads=2)`` in the main thread (SIGTERM handled by default).
MODE ``for``: ``reader.stop_on_signals()`` and a ``for msg in reader`` loop inside ``with``.
MODE ``django``: the example project's ``consume_events`` command (``call_command``), with a
slow ``handle_event``. Every printed body was FIN'd right after; the last line says whether the
SIGTERM handler that was there before is back (``RESTORED True``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from nsqclient.message import Message
from nsqclient.sync import SyncReader

WORK = 0.02  # seconds per message: messages are in flight when SIGTERM lands


def say(line: str) -> None:
    sys.stdout.write(f"{line}\n")  # one write: run()'s two threads never interleave a line
    sys.stdout.flush()


def handle(msg: Message) -> None:
    time.sleep(WORK)
    say(msg.body.decode())


def main() -> None:
    mode, address, topic, channel = sys.argv[1:5]
    if mode == "django":
        run_django(address, topic, channel)
    else:
        reader = SyncReader(topic, channel, nsqd_tcp_addresses=[address], max_in_flight=10)
        if mode == "run":
            reader.run(handle, threads=2)  # returns on SIGTERM, after closing gracefully
        else:
            with reader:
                reader.stop_on_signals()
                for msg in reader:
                    handle(msg)
                    msg.fin()
    print(f"RESTORED {signal.getsignal(signal.SIGTERM) is signal.SIG_DFL}", flush=True)


def run_django(address: str, topic: str, channel: str) -> None:
    project = Path(__file__).resolve().parents[3] / "examples" / "django_project"
    sys.path.insert(0, str(project))
    os.environ.update(
        DJANGO_SETTINGS_MODULE="nsqsite.settings", NSQD_TCP_ADDRESSES=address, NSQ_TOPIC=topic
    )
    import django

    django.setup()
    from django.core.management import call_command
    from events.management.commands.consume_events import Command

    def slow(self: Command, body: bytes) -> None:
        time.sleep(WORK)
        say(body.decode())

    Command.handle_event = slow  # type: ignore[method-assign]
    call_command("consume_events", channel=channel, max_in_flight=10)


if __name__ == "__main__":
    main()
