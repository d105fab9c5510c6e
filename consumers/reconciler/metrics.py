"""Prometheus metrics of the reconciler: operations by status, transitions it resolved, lookups."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from projections.operation import OperationState, OperationStatus


class ReconcilerMetrics:
    """Gauges of the table this worker holds, counters of what it did; its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.operations = Gauge(
            "convdb_reconciler_operations",
            "Operations in this worker's table by status (pending = proposed + executing; unknown waits "
            "for a human)",
            ["status"],
            registry=self.registry,
        )
        self.resolved = Counter(
            "convdb_reconciler_resolved",
            "Ledger transitions the reconciler published, by kind",
            ["kind"],
            registry=self.registry,
        )
        self.lookups = Counter(
            "convdb_reconciler_lookups",
            "Provider lookups by answer",
            ["outcome"],
            registry=self.registry,
        )
        self.dead_letters = Counter(
            "convdb_reconciler_dlq", "Poison records sent to the DLQ", registry=self.registry
        )

    def observe_table(self, states: Iterable[OperationState]) -> None:
        """Set the status gauges from the table (called every tick)."""
        counts = Tally(s.status for s in states if s.status is not None)
        for status in OperationStatus:
            self.operations.labels(status.value).set(counts.get(status, 0))
