"""Partitions whose writes keep failing: retried with a growing wait, and never reported healthy.

A failed write sets its partition aside to be rebuilt from the log (`FleetRunner._set_aside`).
When the failure is the broker's, the retry eventually succeeds; until it does, the partition
makes no progress for every tenant on it, so after `STALLED_AFTER` failures without a commit in
between the runner's `/healthz` names the partition and its last error, and
`convdb_runner_stalled_partitions` counts it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from convdb.infra.ops import Health
from convdb.producers.observe import RunnerMetrics

STALLED_AFTER = 3
"""Failed writes in a row after which a partition is reported stalled."""
MAX_WAIT_S = 30.0
"""Longest wait between two attempts at a failing partition."""


@dataclass
class _Failing:
    count: int
    since: float
    error: str


class PartitionTrouble:
    """Failures per partition since its last commit, reported on `/healthz` and in metrics."""

    def __init__(self, health: Health, metrics: RunnerMetrics) -> None:
        self.health = health
        self.metrics = metrics
        self.failing: dict[int, _Failing] = {}

    def failed(self, partition: int, error: BaseException) -> float:
        """Count a failed write (or rebuild); returns how long to wait before the next attempt."""
        now = time.monotonic()
        found = self.failing.get(partition) or _Failing(0, now, "")
        found.count += 1
        found.error = f"{type(error).__name__}: {str(error)[:300]}"
        self.failing[partition] = found
        self.metrics.write_failures.inc()
        if found.count >= STALLED_AFTER:
            self.health.problem(
                f"partition {partition}",
                f"{found.count} failed writes in {now - found.since:.0f}s with no commit in between; "
                f"last: {found.error}",
            )
        self._gauge()
        return 0.0 if found.count == 1 else min(0.5 * 2 ** (found.count - 2), MAX_WAIT_S)

    def progressed(self, partition: int) -> None:
        """The partition committed something: whatever failed before is over."""
        self.forget(partition)

    def forget(self, partition: int) -> None:
        """Not ours (any more), or fine again: no problem to report."""
        if self.failing.pop(partition, None) is not None:
            self.health.problem(f"partition {partition}", None)
            self._gauge()

    def _gauge(self) -> None:
        self.metrics.stalled.set(sum(1 for f in self.failing.values() if f.count >= STALLED_AFTER))
