"""A consumer that exposes its metrics for Prometheus on ``/metrics``.

OpenTelemetry's Prometheus exporter (``opentelemetry-exporter-prometheus``, which brings
``prometheus-client``) turns nsqclient's OpenTelemetry metrics into the Prometheus text format;
nsqclient itself only needs the ``otel`` extra (the API). Run it against a local cluster::

    pip install 'nsqclient[otel]' opentelemetry-sdk opentelemetry-exporter-prometheus
    NSQD_TCP_ADDRESSES=127.0.0.1:4150 NSQ_TOPIC=events NSQ_CHANNEL=metrics-demo \\
        METRICS_PORT=9464 python -m examples.prometheus_consumer
    curl -s http://127.0.0.1:9464/metrics | grep -E '^(nsq|messaging)_'

SIGTERM (or Ctrl-C) stops it gracefully: what was delivered and not handled goes back to nsqd.
"""

from __future__ import annotations

import logging
import os

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from prometheus_client import start_http_server

from nsqclient.message import Message
from nsqclient.observability import instrument
from nsqclient.sync import SyncReader

log = logging.getLogger("prometheus_consumer")


def handle(msg: Message) -> None:
    """The application's work; returning FINs the message, raising REQs it."""
    log.debug("handled %d bytes", len(msg.body))


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    port = int(os.environ.get("METRICS_PORT", "9464"))
    # Prometheus scrapes this process: the reader answers each scrape with the current values
    provider = MeterProvider(
        metric_readers=[PrometheusMetricReader()],
        resource=Resource.create({"service.name": "prometheus-consumer"}),
    )
    instrument(meter_provider=provider, traces=False)  # before creating the clients
    server, thread = start_http_server(port, addr="127.0.0.1")
    log.info("metrics on http://127.0.0.1:%d/metrics", server.server_port)
    reader = SyncReader(
        os.environ.get("NSQ_TOPIC", "events"),
        os.environ.get("NSQ_CHANNEL", "metrics-demo"),
        nsqd_tcp_addresses=os.environ.get("NSQD_TCP_ADDRESSES", "127.0.0.1:4150").split(","),
    )
    try:
        reader.run(handle, threads=2)  # until SIGTERM / Ctrl-C, then closes gracefully
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        provider.shutdown()


if __name__ == "__main__":
    main()
