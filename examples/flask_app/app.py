"""A Flask app that publishes to nsqd on every request, through one process-wide SyncWriter.

Run it under any WSGI server; it is written to be forked (gunicorn ``--preload``, uWSGI):

    NSQD_TCP_ADDRESSES=127.0.0.1:4150 gunicorn --preload -w 4 --threads 4 \\
        'examples.flask_app.wsgi:app'

The writer is created once at import, before the server forks its workers. That is fine: a
SyncWriter notices that it now lives in a forked child and opens its own connection there on
first use; it never touches the parent's socket or loop thread. ``writer.pub()`` blocks the
request thread until nsqd acknowledged the message, so a 200 means "stored by nsqd". Open
writers are closed gracefully when the worker process exits.

``create_app(addresses)`` builds an app and its writer (``app.extensions["nsq_writer"]``);
``wsgi.py`` builds the module-level ``app`` from ``NSQD_TCP_ADDRESSES`` and ``NSQ_TOPIC``.
"""

from __future__ import annotations

import os

from flask import Flask, jsonify, request
from flask.typing import ResponseReturnValue

from nsqclient.errors import NSQError
from nsqclient.sync import SyncWriter

DEFAULT_TOPIC = "flask-events"


def create_app(
    nsqd_tcp_addresses: list[str], topic: str = DEFAULT_TOPIC, writer: SyncWriter | None = None
) -> Flask:
    app = Flask(__name__)
    nsq = writer if writer is not None else SyncWriter(nsqd_tcp_addresses=nsqd_tcp_addresses)
    app.extensions["nsq_writer"] = nsq

    @app.get("/health")
    def health() -> ResponseReturnValue:
        return jsonify(ok=True, pid=os.getpid())

    @app.post("/events")
    def publish_event() -> ResponseReturnValue:
        body = request.get_data()
        if not body:
            return jsonify(error="empty body"), 400
        try:
            nsq.pub(topic, body, timeout=10)
        except NSQError as exc:  # nsqd refused it, or could not be reached in time
            return jsonify(error=str(exc)), 503
        return jsonify(published=True, pid=os.getpid())

    return app
