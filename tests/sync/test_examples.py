"""The Flask and Django examples, run for real: a threaded WSGI server, gunicorn --preload with
forked workers, Django's view and management command. Every request's message arrives exactly
once."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from werkzeug.serving import make_server

from examples.flask_app.app import create_app
from nsqclient.testing.daemons import NsqdProcess, free_port
from tests.support import wait_until

from .support import DEADLINE, drain_bodies, message_count, unique

ROOT = Path(__file__).resolve().parents[2]
REQUESTS, CLIENT_THREADS = 200, 16


def _post(port: int, body: bytes) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/events", body=body, headers={"Content-Type": "text/plain"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _hammer(port: int, prefix: str) -> tuple[list[bytes], list[tuple[int, bytes]]]:
    """REQUESTS POSTs with unique bodies from CLIENT_THREADS threads; returns bodies, replies."""
    bodies = [f"{prefix}-{i}".encode() for i in range(REQUESTS)]
    replies: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    def client(part: list[bytes]) -> None:
        for body in part:
            reply = _post(port, body)
            with lock:
                replies.append(reply)

    threads = [
        threading.Thread(target=client, args=(bodies[i::CLIENT_THREADS],))
        for i in range(CLIENT_THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE * 3)
    assert not any(t.is_alive() for t in threads)
    return bodies, replies


def _assert_exactly_once(nsqd: NsqdProcess, topic: str, bodies: list[bytes]) -> None:
    assert message_count(nsqd, topic) == len(bodies)
    received = drain_bodies(nsqd, topic, len(bodies))
    assert sorted(received) == sorted(bodies)


def test_flask_under_a_threaded_wsgi_server(nsqd: NsqdProcess) -> None:
    topic = unique("flask")
    app = create_app([nsqd.tcp_address], topic)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        bodies, replies = _hammer(server.server_port, "werkzeug")
    finally:
        server.shutdown()
        serving.join(DEADLINE)
        app.extensions["nsq_writer"].graceful_close()
    assert [status for status, _ in replies] == [200] * REQUESTS, replies[:3]
    _assert_exactly_once(nsqd, topic, bodies)


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_flask_under_gunicorn_preload_with_4_workers(nsqd: NsqdProcess) -> None:
    """The app (and its SyncWriter) is created in the gunicorn master before it forks 4 workers;
    each worker rebuilds the writer on first use."""
    topic = unique("gunicorn")
    port = free_port()
    env = dict(
        os.environ,
        NSQD_TCP_ADDRESSES=nsqd.tcp_address,
        NSQ_TOPIC=topic,
        PYTHONPATH=str(ROOT),
    )
    gunicorn = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--preload",
            "--workers=4",
            "--threads=4",
            "--worker-class=gthread",
            f"--bind=127.0.0.1:{port}",
            "--graceful-timeout=20",
            "--log-level=warning",
            "examples.flask_app.wsgi:app",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: gunicorn.poll() is not None or _port_open(port), what="gunicorn")
        assert gunicorn.poll() is None, gunicorn.communicate(timeout=DEADLINE)[0]
        bodies, replies = _hammer(port, "gunicorn")
        pids = {json.loads(reply)["pid"] for status, reply in replies if status == 200}
    finally:
        gunicorn.send_signal(signal.SIGTERM)  # graceful: workers exit, closing their writers
        try:
            output, _ = gunicorn.communicate(timeout=DEADLINE * 2)
        except subprocess.TimeoutExpired:
            gunicorn.kill()
            output, _ = gunicorn.communicate(timeout=DEADLINE)
    assert [status for status, _ in replies] == [200] * REQUESTS, (replies[:3], output)
    assert gunicorn.returncode == 0, output
    assert "Traceback" not in output, output
    assert gunicorn.pid not in pids  # requests were served by forked workers
    _assert_exactly_once(nsqd, topic, bodies)


def test_django_view_publishes_and_command_consumes(nsqd: NsqdProcess) -> None:
    topic = unique("django")
    env = dict(os.environ, NSQD_TCP_ADDRESSES=nsqd.tcp_address, NSQ_TOPIC=topic)
    script = Path(__file__).parent / "scripts" / "django_driver.py"
    done = subprocess.run(
        [sys.executable, str(script), "120", "8"],
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE * 4,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["statuses"] == [200] * 120
    assert sorted(result["consumed"]) == sorted(result["posted"])
    assert result["summary"] == "consumed 120 events"
    assert message_count(nsqd, topic) == 120
