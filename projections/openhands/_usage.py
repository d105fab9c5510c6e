"""LLM usage derived from OpenHands' statistics reports (they are totals, not per-call events).

OpenHands keeps usage per LLM (`usage_id`) as accumulated totals, with per-call lists only in
`base_state.json`. Each report brings convdb's totals for a usage id up to the reported ones:
one `LLMUsageEvent` per call when the report itemizes everything not yet counted (an import),
else one event with the difference (the webhook's stats updates). Totals only grow, so a stale
or repeated report derives nothing, and the sum of the derived events equals OpenHands' totals.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from immutables import Map

Totals = tuple[int, int, int, float]
"""prompt tokens, completion tokens, cache-read tokens, cost (USD)."""

ZERO: Totals = (0, 0, 0, 0.0)


class UsageItem(NamedTuple):
    """One derived LLM usage record (becomes an `LLMUsageEvent`)."""

    usage_id: str
    part: int
    model: str
    response_id: str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost: float | None
    latency_ms: float


_MAX_COUNT = 2**63 - 1
"""Token counts are Avro longs: a count beyond (refused by the payload checks) counts as none."""


def _int(value: Any) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool)
    return value if ok and 0 <= value <= _MAX_COUNT else 0


def _float(value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok and value >= 0 else 0.0


def _items(value: Any) -> list[dict[str, Any]]:
    """The objects of a list OpenHands reports (anything else in its place holds none)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _totals(metrics: dict[str, Any]) -> Totals:
    acc = metrics.get("accumulated_token_usage")
    acc = acc if isinstance(acc, dict) else {}
    return (
        _int(acc.get("prompt_tokens")),
        _int(acc.get("completion_tokens")),
        _int(acc.get("cache_read_tokens")),
        _float(metrics.get("accumulated_cost")),
    )


def derive_usage(totals: Map[str, Totals], stats: Any) -> tuple[Map[str, Totals], list[UsageItem]]:
    """The usage a stats report adds to `totals` (per usage id), and the new totals."""
    reports = stats.get("usage_to_metrics") if isinstance(stats, dict) else None
    if not isinstance(reports, dict):
        return totals, []
    items: list[UsageItem] = []
    for usage_id, metrics in reports.items():
        if not isinstance(metrics, dict):
            continue
        reported, current = _totals(metrics), totals.get(usage_id, ZERO)
        if not any(r > c for r, c in zip(reported, current, strict=True)):
            continue
        calls = _per_call(usage_id, metrics, reported) if current == ZERO else None
        items.extend(calls or [_difference(usage_id, metrics, reported, current)])
        totals = totals.set(usage_id, tuple(max(r, c) for r, c in zip(reported, current, strict=True)))  # type: ignore[arg-type]
    return totals, items


def _model(metrics: dict[str, Any], call: dict[str, Any] | None = None) -> str:
    name = (call or {}).get("model") or metrics.get("model_name")
    return name if isinstance(name, str) and name else "unknown"


def _difference(usage_id: str, metrics: dict[str, Any], reported: Totals, current: Totals) -> UsageItem:
    prompt, completion, cached, cost = (max(r - c, 0) for r, c in zip(reported, current, strict=True))
    priced = reported[3] > 0 or current[3] > 0
    return UsageItem(
        usage_id,
        0,
        _model(metrics),
        None,
        int(prompt),
        int(completion),
        int(cached),
        float(cost) if priced else None,
        0.0,
    )


def _per_call(usage_id: str, metrics: dict[str, Any], reported: Totals) -> list[UsageItem] | None:
    """One item per call when the lists add up to the reported totals exactly, else None."""
    calls = _items(metrics.get("token_usages"))
    costs = [_float(c.get("cost")) for c in _items(metrics.get("costs"))]
    if not calls:
        return None
    sums = tuple(
        sum(_int(c.get(k)) for c in calls)
        for k in ("prompt_tokens", "completion_tokens", "cache_read_tokens")
    )
    if sums != reported[:3]:
        return None
    if costs and (
        len(costs) != len(calls) or not math.isclose(sum(costs), reported[3], rel_tol=1e-9, abs_tol=1e-15)
    ):
        return None
    if not costs and reported[3] > 0:
        return None
    latencies = {
        lat["response_id"]: _milliseconds(lat.get("latency"))
        for lat in _items(metrics.get("response_latencies"))
        if isinstance(lat.get("response_id"), str)
    }
    items = []
    for i, call in enumerate(calls):
        response_id = call.get("response_id") if isinstance(call.get("response_id"), str) else None
        items.append(
            UsageItem(
                usage_id,
                i + 1,
                _model(metrics, call),
                response_id or None,
                _int(call.get("prompt_tokens")),
                _int(call.get("completion_tokens")),
                _int(call.get("cache_read_tokens")),
                costs[i] if costs else None,
                latencies.get(response_id, 0.0),
            )
        )
    return items


def _milliseconds(seconds: Any) -> float:
    value = _float(seconds) * 1000.0
    return value if math.isfinite(value) else 0.0
