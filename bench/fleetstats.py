"""The fleet bench's arithmetic: step gaps, moved partitions and takeover times (pure, no I/O).

Inputs are what the run left behind: step times per conversation (from the events topic), each
conversation's partition, and the runners' status lines (which partitions each runner was given
and gave up, and when). Everything is wall-clock seconds on one machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.fleetprocs import Steps, owners

Line = dict[str, object]


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def gaps_in(times: list[float], t0: float, t1: float, stalled_after: float) -> list[float]:
    """The gaps between consecutive steps that end in [t0, t1] (each gap belongs to one span).

    A conversation still waiting at t1 counts with the gap it has so far, if that is longer than
    `stalled_after` (a conversation that never came back must not drop out of the figures).
    """
    out = [b - a for a, b in zip(times, times[1:], strict=False) if t0 <= b <= t1]
    before = [t for t in times if t <= t1]
    if before and t1 - before[-1] > stalled_after and (len(before) == len(times)):
        out.append(t1 - before[-1])
    return out


@dataclass(frozen=True)
class Window:
    """One fleet event: what was done, and the span whose gaps and moves belong to it."""

    name: str
    t0: float
    t1: float
    dead: dict[str, float]
    """Runner name -> when it was SIGKILLed (up to and including this event)."""


def usual_gap(steps: Steps, live: set[str], t0: float, t1: float) -> tuple[float, float, float]:
    """p50 and p99 step gap of the live conversations in a quiet span, and the fleet's steps/s."""
    gaps = [g for cid in live for g in gaps_in(steps.times.get(cid, []), t0, t1, math.inf)]
    if not gaps:
        raise ValueError("no steps in the quiet span")
    return percentile(gaps, 0.5), percentile(gaps, 0.99), steps.count_between(t0, t1) / (t1 - t0)


def moved_partitions(
    lines: list[Line], window: Window, partitions: int
) -> dict[int, tuple[str | None, str | None]]:
    """Partition -> (owner before, owner after) for the partitions whose owner changed."""
    before = owners(lines, window.dead, window.t0 - 1e-3)  # type: ignore[arg-type]
    after = owners(lines, window.dead, window.t1)  # type: ignore[arg-type]
    return {p: (before.get(p), after.get(p)) for p in range(partitions) if before.get(p) != after.get(p)}


def takeovers(
    lines: list[Line], steps: Steps, window: Window, moved: dict[int, tuple[str | None, str | None]]
) -> dict[int, tuple[float, float]]:
    """Moved partition -> (release -> first step served by its new owner, its assignment -> that step).

    The second is counted from the message that step answers when it was sent after the
    assignment (`Steps.ready`): a partition with no message waiting is not slow to resume, it
    has nothing to do yet (on Apache Kafka the bench's partitions get a message every few
    seconds, which made "assignment -> first step" 5-10 s there).

    Assignment: the new owner's last `assigned` line for it in the window, from the start of its
    assignment callback (`began`: the fencing and restore the line reports come after it).
    Release: the last `revoked`/`lost` line for it before that (a span of several rebalances
    counts only the last move), else the moment its old owner was killed, else the event's start.
    """
    out: dict[int, tuple[float, float]] = {}
    for p, (old, new) in moved.items():
        if new is None:
            continue
        assigned = [
            float(line.get("began") or line["at"])  # type: ignore[arg-type]
            for line in lines
            if line["runner"] == new
            and line["event"] in ("assigned", "restored")
            and window.t0 <= _at(line) <= window.t1
            and p in _parts(line)
        ]
        if not assigned:
            continue
        release = _release(lines, window, old, p, assigned[-1])
        served = [
            (t, cid, i)
            for cid, ts in steps.times.items()
            if steps.partition[cid] == p
            for i, t in enumerate(ts)
            if t > assigned[-1]
        ]
        if served:
            first, cid, i = min(served)
            # From the assignment, or from the message's arrival when none waited for the new owner.
            ready = max(assigned[-1], steps.ready(cid, i) or assigned[-1])
            out[p] = (first - release, first - ready)
    return out


def _at(line: Line) -> float:
    return float(line["at"])  # type: ignore[arg-type]


def _parts(line: Line) -> list[int]:
    parts = line.get("partitions")
    if isinstance(parts, list):
        return parts
    return [line["partition"]] if isinstance(line.get("partition"), int) else []  # type: ignore[list-item]


def _release(lines: list[Line], window: Window, old: str | None, p: int, assigned: float) -> float:
    released = [
        _at(line)
        for line in lines
        if line["event"] in ("revoked", "lost") and window.t0 <= _at(line) <= assigned and p in _parts(line)
    ]
    killed = window.dead.get(old) if old is not None else None
    if killed is not None and window.t0 <= killed <= assigned:
        released.append(killed)
    return max(released, default=window.t0)


def event_figures(
    prefix: str,
    lines: list[Line],
    steps: Steps,
    live: set[str],
    window: Window,
    partitions: int,
    period_s: float,
    usual_p50: float,
) -> tuple[dict[str, float], dict[int, tuple[float, float]]]:
    """The figures of one event (keys start with `prefix`), and the takeover of each moved partition."""
    moved = moved_partitions(lines, window, partitions)
    taken = takeovers(lines, steps, window, moved)
    by_class: dict[str, list[float]] = {"unmoved": [], "moved": []}
    for cid in live:
        klass = "moved" if steps.partition.get(cid) in moved else "unmoved"
        by_class[klass] += gaps_in(steps.times.get(cid, []), window.t0, window.t1, 2 * period_s)
    figures: dict[str, float] = {f"{prefix}_moved_partitions": float(len(moved))}
    for klass, gaps in by_class.items():
        if gaps:
            figures[f"{prefix}_{klass}_gap_p50_s"] = percentile(gaps, 0.5)
            figures[f"{prefix}_{klass}_gap_p99_s"] = percentile(gaps, 0.99)
            figures[f"{prefix}_{klass}_gap_max_s"] = max(gaps)
            figures[f"{prefix}_{klass}_max_ratio"] = max(gaps) / usual_p50
    every = by_class["unmoved"] + by_class["moved"]
    if every:
        figures[f"{prefix}_gap_max_s"] = max(every)
    if taken:
        release = [r for r, _ in taken.values()]
        after = [a for _, a in taken.values()]
        figures[f"{prefix}_takeover_p50_s"] = percentile(release, 0.5)
        figures[f"{prefix}_takeover_max_s"] = max(release)
        figures[f"{prefix}_resume_after_assign_p99_s"] = percentile(after, 0.99)
    figures[f"{prefix}_steps_per_s"] = steps.count_between(window.t0, window.t1) / (window.t1 - window.t0)
    return figures, taken


def growth_exponent(sizes: list[int], seconds: list[float]) -> float:
    """The slope of log(time) over log(size) between the smallest and the largest size (1: linear)."""
    if len(sizes) < 2 or min(seconds) <= 0:
        raise ValueError("need two sizes with positive times")
    return math.log(seconds[-1] / seconds[0]) / math.log(sizes[-1] / sizes[0])
