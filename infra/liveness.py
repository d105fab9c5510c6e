"""Whether a consumer-group member holds partitions, and for how long it has held none.

A member can sit in its group and do nothing: more members than partitions, or a group whose
rebalance never completes (reported once on the embedded broker after members were SIGKILLed
during a rebalance: fresh runners stayed without partitions for 20+ minutes and logged only
"started"). Every group member (fleet runner, `consume` runner, archive) keeps an
`AssignmentWatch`: past `ops.unassigned_after_s` it says "no partitions assigned for N s" in its
log (again at that interval), on `/healthz` (a problem, so 503) and as a gauge.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Gauge

logger = logging.getLogger(__name__)

PROBLEM = "unassigned"
"""The `/healthz` problem name."""


class AssignmentWatch:
    """Tracks one member's partitions; reports once it has had none for `after_s` seconds."""

    def __init__(
        self,
        member: str,
        after_s: float,
        registry: CollectorRegistry | None = None,
        set_problem: Callable[[str, str | None], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.member = member
        self.after_s = after_s
        self.partitions: set[tuple[str, int]] = set()
        self._set_problem = set_problem
        self._clock = clock
        self._since: float | None = clock()  # a member starts without partitions
        self._logged_at: float | None = None
        if registry is not None:
            unassigned = Gauge(
                "convdb_group_unassigned_seconds",
                "Seconds this group member has held no partition (0 while it holds some)",
                ["member"],
                registry=registry,
            )
            unassigned.labels(member).set_function(self.unassigned_s)
            held = Gauge(
                "convdb_group_assigned_partitions",
                "Partitions this group member holds",
                ["member"],
                registry=registry,
            )
            held.labels(member).set_function(lambda: len(self.partitions))

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Partitions were assigned (eager protocol: the whole new assignment)."""
        self.partitions |= set(partitions)
        if self.partitions and self._since is not None:
            if self._logged_at is not None:
                logger.warning("%s: partitions assigned again after %.0f s", self.member, self.unassigned_s())
            self._since, self._logged_at = None, None
            if self._set_problem is not None:
                self._set_problem(PROBLEM, None)

    def revoke(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Partitions were revoked or lost."""
        self.partitions -= set(partitions)
        if not self.partitions and self._since is None:
            self._since = self._clock()

    def unassigned_s(self) -> float:
        """Seconds without any partition (0 while holding some)."""
        return 0.0 if self._since is None else self._clock() - self._since

    def problem(self) -> str | None:
        """'no partitions assigned for N s' once that lasted `after_s`, else None."""
        idle = self.unassigned_s()
        return f"no partitions assigned for {idle:.0f} s" if idle >= self.after_s else None

    def check(self) -> str | None:
        """Call from the poll loop: sets the health problem, and logs it at most every `after_s`.

        Returns the problem when it was logged just now (for a caller's own status line), else None.
        """
        problem = self.problem()
        if problem is None:
            return None
        if self._set_problem is not None:
            self._set_problem(PROBLEM, problem)
        now = self._clock()
        if self._logged_at is not None and now - self._logged_at < self.after_s:
            return None
        self._logged_at = now
        logger.warning(
            "%s: %s (group members beyond the partition count, or a stuck rebalance)", self.member, problem
        )
        return problem
