"""A small server-side SVG chart: cumulative tokens and cost of a conversation over time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

WIDTH, HEIGHT, PAD = 560, 160, 36
MAX_POINTS = 240
"""Points drawn per line; longer series are thinned (the last point is always kept)."""


@dataclass(frozen=True)
class Chart:
    """Polyline points (SVG coordinates) and the labels the template prints."""

    tokens: str
    cost: str
    total_tokens: int
    total_cost: float
    start: str
    end: str
    calls: int

    @property
    def summary(self) -> str:
        """A text alternative for screen readers."""
        return (
            f"{self.calls} LLM calls from {self.start} to {self.end}: "
            f"{self.total_tokens:,} tokens, ${self.total_cost:,.4f} in all"
        )


def usage_chart(usages: list[dict[str, Any]]) -> Chart | None:
    """The chart of `llm_usage` events (in time order); None when there are none."""
    if not usages:
        return None
    times = [datetime.fromisoformat(u["timestamp"]).timestamp() for u in usages]
    tokens, cost, t_sum, c_sum = [], [], 0, 0.0
    for u in usages:
        t_sum += int(u.get("prompt_tokens") or 0) + int(u.get("completion_tokens") or 0)
        c_sum += float(u.get("cost") or 0.0)
        tokens.append(t_sum)
        cost.append(c_sum)
    keep = _thin(len(usages))
    span = (times[-1] - times[0]) or 1.0

    def line(values: list[float], top: float) -> str:
        top = top or 1.0
        points = []
        for i in keep:
            x = PAD + (times[i] - times[0]) / span * (WIDTH - 2 * PAD)
            y = HEIGHT - PAD / 2 - values[i] / top * (HEIGHT - PAD)
            points.append(f"{x:.1f},{y:.1f}")
        return " ".join(points)

    return Chart(
        tokens=line([float(v) for v in tokens], float(t_sum)),
        cost=line(cost, c_sum),
        total_tokens=t_sum,
        total_cost=c_sum,
        start=usages[0]["timestamp"],
        end=usages[-1]["timestamp"],
        calls=len(usages),
    )


def _thin(n: int) -> list[int]:
    if n <= MAX_POINTS:
        return list(range(n))
    step = n / MAX_POINTS
    picked = sorted({int(i * step) for i in range(MAX_POINTS)} | {n - 1})
    return picked
