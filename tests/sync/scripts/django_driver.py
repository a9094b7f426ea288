"""Drive the Django example in its own process (Django settings are process-global).

    python django_driver.py REQUESTS THREADS

Needs ``NSQD_TCP_ADDRESSES``/``NSQ_TOPIC`` in the environment. POSTs REQUESTS unique bodies to the
``/events`` view from THREADS threads (Django's test client), closes the process's writer, then
runs ``call_command("consume_events", count=REQUESTS)`` and prints one JSON line: the bodies
posted and the bodies the command printed.
"""

from __future__ import annotations

import io
import json
import os
import sys
import threading
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[3] / "examples" / "django_project"


def main() -> None:
    requests, threads = int(sys.argv[1]), int(sys.argv[2])
    sys.path.insert(0, str(PROJECT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nsqsite.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client
    from events.nsq import close_writer

    bodies = [f"django-{i}" for i in range(requests)]
    statuses: list[int] = []
    lock = threading.Lock()

    def post(part: list[str]) -> None:
        client = Client()
        for body in part:
            response = client.post("/events", data=body, content_type="text/plain")
            with lock:
                statuses.append(response.status_code)

    workers = [threading.Thread(target=post, args=(bodies[i::threads],)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    close_writer()
    out, err = io.StringIO(), io.StringIO()
    call_command("consume_events", count=requests, idle_timeout=20, stdout=out, stderr=err)
    print(
        json.dumps(
            {
                "statuses": statuses,
                "posted": bodies,
                "consumed": out.getvalue().splitlines(),
                "summary": err.getvalue().strip(),
            }
        )
    )


if __name__ == "__main__":
    main()
