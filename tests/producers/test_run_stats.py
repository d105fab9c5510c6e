"""Run statistics: the broker wait of a step is part of its overhead, never more than it."""

from __future__ import annotations

from convdb.producers._stats import RunStats


def test_cpu_overhead_is_never_negative() -> None:
    stats = RunStats()
    # A step with parallel actions: their tool time (summed per thread) exceeds the wall time,
    # so the step's overhead comes out negative while it waited 12 ms for the broker.
    stats.count_step(-5.0, 12.0)
    stats.count_step(20.0, 8.0)
    found = stats.as_dict()
    assert found["overhead_ms"] == 20.0 and found["step_publish_ms"] == 8.0
    assert found["cpu_overhead_per_step_ms"] == 6.0
    stats.count_step(3.0, 9.0)  # the wait is within the overhead: counted up to it
    assert stats.step_publish_ms == 11.0 and stats.as_dict()["cpu_overhead_per_step_ms"] >= 0
