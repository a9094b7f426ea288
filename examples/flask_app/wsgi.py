"""The WSGI entry point: ``app``, configured from the environment, created at import (before a
``--preload`` server forks its workers).

    NSQD_TCP_ADDRESSES=127.0.0.1:4150 NSQ_TOPIC=events \\
        gunicorn --preload -w 4 --threads 4 'examples.flask_app.wsgi:app'
"""

from __future__ import annotations

import os

from .app import DEFAULT_TOPIC, create_app

app = create_app(
    os.environ.get("NSQD_TCP_ADDRESSES", "127.0.0.1:4150").split(","),
    os.environ.get("NSQ_TOPIC", DEFAULT_TOPIC),
)
