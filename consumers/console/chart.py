"""A small server-side SVG chart: cumulative tokens and cost of a conversation over time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

WIDTH, HEIGHT = 560, 220
LEFT, RIGHT, TOP, BOTTOM = 58, 58, 26, 40
"""Plot margins: the token axis on the left, the cost axis on the right, time below."""
TICKS = 4
"""Intervals on each axis (5 labelled ticks)."""
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
    x_ticks: tuple[tuple[float, str], ...] = ()
    """(x, UTC time label) along the time axis."""
    y_ticks: tuple[tuple[float, str, str], ...] = ()
    """(y, tokens label, cost label) up both value axes."""
    dots: tuple[tuple[float, float], ...] = ()
    """(x, y) of each LLM call drawn on the tokens line."""
    box: tuple[int, int, int, int] = (LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)
    """The plot area: x0, y0, x1, y1."""

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
    x0, y0, x1, y1 = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM

    def xy(i: int, value: float, top: float) -> tuple[float, float]:
        return x0 + (times[i] - times[0]) / span * (x1 - x0), y1 - value / (top or 1.0) * (y1 - y0)

    def line(values: list[float], top: float) -> str:
        return " ".join("{:.1f},{:.1f}".format(*xy(i, values[i], top)) for i in keep)

    x_ticks = tuple((x0 + k / TICKS * (x1 - x0), _utc(times[0] + k / TICKS * span)) for k in range(TICKS + 1))
    y_ticks = tuple(
        (y1 - k / TICKS * (y1 - y0), f"{round(t_sum * k / TICKS):,}", f"${c_sum * k / TICKS:,.4f}")
        for k in range(TICKS + 1)
    )
    return Chart(
        tokens=line([float(v) for v in tokens], float(t_sum)),
        cost=line(cost, c_sum),
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        dots=tuple(xy(i, float(tokens[i]), float(t_sum)) for i in keep),
        total_tokens=t_sum,
        total_cost=c_sum,
        start=usages[0]["timestamp"],
        end=usages[-1]["timestamp"],
        calls=len(usages),
    )


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%H:%M:%S")


def _thin(n: int) -> list[int]:
    if n <= MAX_POINTS:
        return list(range(n))
    step = n / MAX_POINTS
    picked = sorted({int(i * step) for i in range(MAX_POINTS)} | {n - 1})
    return picked
