"""Prometheus metrics of a consumer process, and one small HTTP server for `/metrics` and `/healthz`.

Lag is computed from the high watermark the *fetch* reports (`get_watermark_offsets(cached=True)`
after polling), never from ListOffsets, which the embedded broker answers wrongly for
multi-record batches (INFRA-NOTES §1.5).
"""

from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

logger = logging.getLogger(__name__)


class ConsumerMetrics:
    """The counters and gauges of one runner, in their own registry (several runners per test process)."""

    def __init__(self, consumer: str) -> None:
        self.consumer = consumer
        self.registry = CollectorRegistry()
        labels = ["consumer"]
        self.events = Counter(
            "convdb_consumer_events", "Records applied to the store", labels, registry=self.registry
        )
        self.dead_letters = Counter(
            "convdb_consumer_dlq", "Poison records sent to the DLQ", labels, registry=self.registry
        )
        self.batches = Histogram(
            "convdb_consumer_batch_seconds",
            "Wall time of one batch: decode, apply, commit",
            labels,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.lag = Gauge(
            "convdb_consumer_lag",
            "Records behind the fetch-reported high watermark",
            ["consumer", "topic", "partition"],
            registry=self.registry,
        )
        self.rate = Gauge(
            "convdb_consumer_events_per_second",
            "Records applied per second (last 5 s)",
            labels,
            registry=self.registry,
        )
        self.last_progress = time.monotonic()
        self.healthy = True
        self._window: list[tuple[float, int]] = []

    def batch_done(self, applied: int, dead: int, seconds: float) -> None:
        """Record one committed batch."""
        self.events.labels(self.consumer).inc(applied)
        if dead:
            self.dead_letters.labels(self.consumer).inc(dead)
        self.batches.labels(self.consumer).observe(seconds)
        now = time.monotonic()
        self.last_progress = now
        self._window = [(t, n) for t, n in self._window if now - t <= 5.0]
        self._window.append((now, applied))
        span = max(now - self._window[0][0], 1.0)
        self.rate.labels(self.consumer).set(sum(n for _, n in self._window) / span)

    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        """Set the lag of one assigned partition."""
        self.lag.labels(self.consumer, topic, str(partition)).set(max(lag, 0))

    def forget_partition(self, topic: str, partition: int) -> None:
        """Drop the lag series of a partition that was revoked."""
        try:
            self.lag.remove(self.consumer, topic, str(partition))
        except KeyError:
            pass

    def render(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


class MetricsServer:
    """Serves `/metrics` (Prometheus text) and `/healthz` (200 while the runner loop is alive)."""

    def __init__(self, metrics: ConsumerMetrics, host: str = "127.0.0.1", port: int = 0) -> None:
        handler = _handler(metrics)
        self._server = ThreadingHTTPServer((host, port), handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics", daemon=True)

    def start(self) -> MetricsServer:
        """Start serving in a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()


def _handler(metrics: ConsumerMetrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.startswith("/metrics"):
                self._reply(200, metrics.render(), CONTENT_TYPE_LATEST)
            elif self.path.startswith("/healthz"):
                ok = metrics.healthy
                self._reply(200 if ok else 503, b"ok\n" if ok else b"unhealthy\n", "text/plain")
            else:
                self._reply(404, b"not found: try /metrics or /healthz\n", "text/plain")

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - base signature
            logger.debug("metrics http: " + format, *args)

    return Handler
