"""Prometheus metrics of the reconciler: operations by status, transitions it resolved, lookups."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable
from typing import get_args

from prometheus_client import CollectorRegistry, Counter, Gauge

from convdb.projections.operation import OperationState, OperationStatus
from convdb.projections.settlement import LookupResult
from convdb.schemas.records import LEDGER_TYPES


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
        self.undecidable = Counter(
            "convdb_reconciler_undecidable",
            "Ticks on which an open operation could not be decided (its records hold values the "
            "machine cannot use; the log names it once)",
            registry=self.registry,
        )
        # Every series exists from the start (at 0), so a dashboard shows "none yet", not "no data".
        for record_type in LEDGER_TYPES:
            self.resolved.labels(record_type.model_fields["kind"].default)
        for status in OperationStatus:
            self.operations.labels(status.value).set(0)
        for outcome in get_args(LookupResult.model_fields["outcome"].annotation):
            self.lookups.labels(outcome)

    def observe_table(self, states: Iterable[OperationState]) -> None:
        """Set the status gauges from the table (called every tick)."""
        counts = Tally(s.status for s in states if s.status is not None)
        for status in OperationStatus:
            self.operations.labels(status.value).set(counts.get(status, 0))
