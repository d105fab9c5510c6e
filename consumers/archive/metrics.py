"""Prometheus metrics of the archive service: objects and bytes stored, records not yet archived."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from convdb.consumers.archive.sink import StoredObject


class ArchiveMetrics:
    """The archive's counters and its lag, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.objects = Counter(
            "convdb_archive_objects", "Archive objects stored", ["topic"], registry=self.registry
        )
        self.bytes = Counter(
            "convdb_archive_bytes", "Bytes of archive objects stored", ["topic"], registry=self.registry
        )
        self.records = Counter(
            "convdb_archive_records", "Records stored in archive objects", ["topic"], registry=self.registry
        )
        self.lag = Gauge(
            "convdb_archive_lag",
            "Records not yet in a stored object: fetch-reported high watermark minus committed offset",
            ["topic", "partition"],
            registry=self.registry,
        )

    def stored(self, stored: StoredObject) -> None:
        """Count one stored object."""
        topic = stored.index.topic
        self.objects.labels(topic).inc()
        self.bytes.labels(topic).inc(stored.size)
        self.records.labels(topic).inc(stored.index.records)

    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        """Set the lag of one assigned partition."""
        self.lag.labels(topic, str(partition)).set(max(lag, 0))

    def forget(self, topic: str, partition: int) -> None:
        """Drop the lag series of a revoked partition."""
        try:
            self.lag.remove(topic, str(partition))
        except KeyError:
            pass
