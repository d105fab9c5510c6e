"""What the console says about how each operation was settled, and where a runner was taken over.

Read from the effect ledger the page already loads (no query of its own). The ledger names who
recorded each transition (`runner`, `lookup`, `receipt`, `reconciler`, `human:<tenant>:<name>`),
not which runner process: a takeover is told from the records, as an attempt a runner started and
never finished, then settled later by someone else (recovery's lookup, a receipt, the reconciler,
a human). The marker is shown in the timeline at the moment of that later record.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

TERMINAL = ("effect_confirmed", "effect_failed", "effect_resolved", "effect_unknown")
"""Ledger kinds that end (or hand over) an attempt."""

CHILD_TARGET = "conversation:"
"""The target of a delegated child's operation, which the child's report settles as a receipt."""

_BY = {
    "runner": "by the call (the tool answered the runner)",
    "lookup": "by lookup (the provider was asked whether it happened)",
    "receipt": "by the provider's receipt",
    "reconciler": "by the reconciler",
}
_STATUS_WORD = {
    "confirmed": "Confirmed",
    "failed": "Failed",
    "unknown": "Unknown",
    "executing": "In flight",
    "proposed": "Proposed",
}


def who(by: str) -> str:
    """A ledger `by` as a reader says it: 'human:demo:Ada' -> 'a human, Ada (tenant demo)'."""
    if by.startswith("human:"):
        _, tenant, name = (by.split(":", 2) + ["", ""])[:3]
        return f"a human, {name or 'unnamed'}" + (f" (tenant {tenant})" if tenant else "")
    return {"runner": "the runner", "reconciler": "the reconciler", "receipt": "a receipt"}.get(by, by)


def _settling(ledger: list[dict[str, Any]]) -> dict[str, Any] | None:
    ends = [r for r in ledger if r["kind"] in TERMINAL]
    return ends[-1] if ends else None


def headline(op: dict[str, Any]) -> str:
    """How the operation stands and who settled it, in one line."""
    status = op.get("status") or "proposed"
    word = _STATUS_WORD.get(status, status)
    resolution = op.get("resolution") or {}
    if resolution.get("by"):
        decided = f"{word} · decided by {who(resolution['by'])}: {resolution.get('decision')}"
        return decided + (f" — “{resolution['note']}”" if resolution.get("note") else "")
    settling = _settling(op.get("ledger") or [])
    if status == "unknown":
        recorded = who(settling["by"]) if settling else "the runner"
        return f"{word} · waiting for a human to decide (recorded by {recorded})"
    if settling is None:
        return f"{word} · no outcome recorded yet"
    by = settling["by"]
    return f"{word} {_BY.get(by, 'by ' + who(by))}"


def reason_and_detail(op: dict[str, Any]) -> tuple[str, str]:
    """The evidence's reason and detail, or what the ledger says when they are empty (never blank)."""
    evidence = op.get("evidence") or {}
    reason, detail = evidence.get("reason") or "", evidence.get("detail") or ""
    ledger = op.get("ledger") or []
    settling = _settling(ledger)
    attempts = sum(1 for r in ledger if r["kind"] == "effect_started")
    if not reason:
        if settling is None:
            reason = "No outcome yet: the call has not been made or has not returned."
        elif settling["by"] == "runner":
            reason = "The call returned, and the runner recorded its outcome: nothing was in doubt."
        else:
            reason = f"Recorded {_BY.get(settling['by'], 'by ' + who(settling['by']))}."
    if not detail:
        kinds = ", ".join(f"{r['kind']} by {who(r['by'])}" for r in ledger) or "no ledger records"
        detail = f"{attempts} attempt{'s' if attempts != 1 else ''}; ledger: {kinds}."
    return reason, detail


def takeovers(operations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Markers, oldest first: each attempt a runner started and did not finish, settled later by
    someone else (`at`: when that happened; `started`: when the stopped runner began the call)."""
    markers = []
    for op in operations:
        if (op.get("target") or "").startswith(CHILD_TARGET):
            continue  # a child's report is its receipt by design: the normal path, not a takeover
        open_start: dict[str, Any] | None = None
        for record in op.get("ledger") or []:
            if record["kind"] == "effect_started":
                if open_start is not None:  # a second attempt without an outcome of the first
                    markers.append(_marker(op, open_start, record, "started the call again"))
                open_start = record
            elif record["kind"] in TERMINAL and open_start is not None:
                if record["by"] != "runner" or record["kind"] == "effect_unknown":
                    markers.append(_marker(op, open_start, record, _done(record)))
                open_start = None
    return sorted(markers, key=lambda m: m["at"])


def _done(record: dict[str, Any]) -> str:
    outcome = {
        "effect_confirmed": "confirmed it",
        "effect_failed": "recorded it failed",
        "effect_resolved": "recorded a decision",
        "effect_unknown": "could not tell whether it happened, and handed it to a human",
    }[record["kind"]]
    if record["by"] == "runner":  # recovery's own record: no lookup, receipt or human answered
        return f"{outcome} (recorded by the runner that took over)"
    return f"{outcome} {_BY.get(record['by'], 'as ' + who(record['by']))}"


def _marker(op: dict[str, Any], start: dict[str, Any], end: dict[str, Any], what: str) -> dict[str, Any]:
    tool = (op.get("intent") or {}).get("tool") or "?"
    began, at = _time(start["timestamp"]), _time(end["timestamp"])
    return {
        "operation_id": op["operation_id"],
        "tool": tool,
        "started": start["timestamp"],
        "at": end["timestamp"],
        "gap_s": (at - began).total_seconds(),
        "text": (
            f"The runner calling {tool} stopped during the call (no outcome recorded); "
            f"{(at - began).total_seconds():.0f} s later the conversation was taken over and recovery {what}."
        ),
    }


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value)


def place(
    markers: list[dict[str, Any]], events: list[dict[str, Any]]
) -> dict[str | None, list[dict[str, Any]]]:
    """Markers by the id of the first shown event at or after each (None: after the last one)."""
    placed: dict[str | None, list[dict[str, Any]]] = {}
    for marker in markers:
        at = _time(marker["at"])
        after = next((e["id"] for e in events if _time(e["timestamp"]) >= at), None)
        placed.setdefault(after, []).append(marker)
    return placed
