"""``manage.py consume_events``: consume the events topic and print each body on a line.

    python manage.py consume_events                 # until Ctrl-C
    python manage.py consume_events --count 100     # stop after 100 messages
    python manage.py consume_events --idle-timeout 5

Each message is FIN'd after it was handled. Ctrl-C, SIGTERM (``docker stop``, systemd,
Kubernetes) or any error leaves the ``with`` block after the message in hand, which hands every
unfinished message back to nsqd at once.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from nsqclient.sync import SyncReader


class Command(BaseCommand):
    help = "Consume events from NSQ and print each message body on its own line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--count", type=int, default=0, help="stop after N (0: no limit)")
        parser.add_argument("--channel", default="django", help="NSQ channel")
        parser.add_argument(
            "--idle-timeout",
            type=float,
            default=None,
            help="stop after this many seconds without a message",
        )
        parser.add_argument("--max-in-flight", type=int, default=50)

    def handle(self, *args: Any, **options: Any) -> None:
        count: int = options["count"]
        consumed = 0
        with SyncReader(
            settings.NSQ_TOPIC,
            options["channel"],
            nsqd_tcp_addresses=settings.NSQD_TCP_ADDRESSES,
            max_in_flight=options["max_in_flight"],
        ) as reader:
            reader.stop_on_signals()  # SIGTERM: finish the message in hand, then leave
            while not count or consumed < count:
                msg = reader.get(timeout=options["idle_timeout"])
                if msg is None:
                    break
                self.handle_event(msg.body)
                msg.fin()
                consumed += 1
        self.stderr.write(f"consumed {consumed} events")

    def handle_event(self, body: bytes) -> None:
        """Where a real project would do its work; here, print the body."""
        self.stdout.write(body.decode("utf-8", "replace"))
