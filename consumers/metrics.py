"""Prometheus metrics of a consumer process, and one small HTTP server for `/metrics` and `/healthz`.

Lag is computed from the high watermark the *fetch* reports (`get_watermark_offsets(cached=True)`
after polling), never from ListOffsets, which the embedded broker answers wrongly for
multi-record batches (INFRA-NOTES §1.5).
"""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from convdb.infra.liveness import PROBLEM as UNASSIGNED
from convdb.infra.liveness import AssignmentWatch
from convdb.infra.ops import OpsServer, Report

logger = logging.getLogger(__name__)


class ConsumerMetrics:
    """The counters and gauges of one runner, in their own registry (several runners per test process)."""

    def __init__(self, consumer: str, stall_after_s: float = 300.0, unassigned_after_s: float = 60.0) -> None:
        self.consumer = consumer
        self.stall_after_s = stall_after_s
        self.registry = CollectorRegistry()
        self.assignment = AssignmentWatch(f"consumer {consumer}", unassigned_after_s, self.registry)
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
        # Series exist from the start (at 0), so "no poison yet" is not "no data".
        self.events.labels(consumer)
        self.dead_letters.labels(consumer)
        self.rate.labels(consumer).set(0)
        self.last_progress = time.monotonic()
        self.last_commit = time.monotonic()
        self.retrying: tuple[float, str] | None = None
        """(since, last error) while a batch's store transaction is being retried."""
        Gauge(
            "convdb_consumer_retrying_seconds",
            "How long the batch in hand has been retried on an error of the store or the DLQ (0: none)",
            registry=self.registry,
        ).set_function(self._retrying_s)
        self.healthy = True
        self.applied = 0
        """Records applied so far (the events counter's value, as a plain int: a reader polling it,
        such as the sink bench, does not collect the whole registry while the runner works)."""
        self._lags: dict[tuple[str, int], int] = {}
        self._window: list[tuple[float, int]] = []

    def batch_done(self, applied: int, dead: int, seconds: float) -> None:
        """Record one committed batch."""
        self.events.labels(self.consumer).inc(applied)
        self.applied += applied
        if dead:
            self.dead_letters.labels(self.consumer).inc(dead)
        self.batches.labels(self.consumer).observe(seconds)
        now = time.monotonic()
        self.last_progress = self.last_commit = now
        self._window = [(t, n) for t, n in self._window if now - t <= 5.0]
        self._window.append((now, applied))
        span = max(now - self._window[0][0], 1.0)
        self.rate.labels(self.consumer).set(sum(n for _, n in self._window) / span)

    def _retrying_s(self) -> float:
        retrying = self.retrying
        return 0.0 if retrying is None else time.monotonic() - retrying[0]

    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        """Set the lag of one assigned partition."""
        self.lag.labels(self.consumer, topic, str(partition)).set(max(lag, 0))
        self._lags[(topic, partition)] = max(lag, 0)

    def forget_partition(self, topic: str, partition: int) -> None:
        """Drop the lag series of a partition that was revoked."""
        self._lags.pop((topic, partition), None)
        try:
            self.lag.remove(self.consumer, topic, str(partition))
        except KeyError:
            pass

    def render(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)

    def report(self) -> Report:
        """`/healthz`: the loop runs, its store commits, and records behind are being consumed.

        An idle consumer (nothing behind) is healthy; one with records behind that committed
        nothing for the stall limit is not, nor one whose batch the store keeps refusing.
        """
        now = time.monotonic()
        idle = now - self.last_progress
        problems: dict[str, str] = {}
        if not self.healthy:
            problems["stopped"] = "the consumer loop has ended"
        if idle > self.stall_after_s:
            problems["stalled"] = f"no loop progress for {idle:.0f}s (store or broker hanging?)"
        unassigned = self.assignment.problem()
        if unassigned:
            problems[UNASSIGNED] = unassigned
        if self.retrying is not None:
            problems["store"] = f"a batch has failed for {now - self.retrying[0]:.0f}s: {self.retrying[1]}"
        behind = sum(self._lags.values())
        if behind and now - self.last_commit > self.stall_after_s:
            problems["no_progress"] = (
                f"{behind} record(s) behind and nothing committed for {now - self.last_commit:.0f}s"
            )
        return not problems, {
            "consumer": self.consumer,
            "since_progress_s": round(idle, 1),
            "behind": behind,
            "problems": problems,
        }


class MetricsServer(OpsServer):
    """`/metrics` and `/healthz` of one runner (`convdb.infra.ops.OpsServer` over its registry)."""

    def __init__(self, metrics: ConsumerMetrics, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(metrics.registry, metrics.report, host, port)
