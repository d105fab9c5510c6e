"""The conversation page "as of" a moment: every panel as it was then, not only the timeline.

A moment is a time, an events offset, or a `#seq` (the moment that event was written). The
timeline is the views' fold of the stored log up to it; the stats are the pure stats fold of the
same events; the three facts and the effect ledger are told from those events and from each
shown operation's ledger records up to that time. Nothing here is live.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from convdb.consumers._rows import micros
from convdb.consumers.console.crash import TERMINAL
from convdb.consumers.effects.queries import RUN_STOPPED
from convdb.consumers.views.queries import stored_events
from convdb.projections import stats, view

_STATUS_OF = {
    "effect_proposed": "proposed",
    "effect_started": "executing",
    "effect_confirmed": "confirmed",
    "effect_failed": "failed",
    "effect_unknown": "unknown",
}
_DECIDED = {"confirmed": "confirmed", "failed": "failed", "retry": "proposed"}


@dataclass
class Moment:
    """Where "as of" stands: at most one of a time and an offset, or a seq (with its time)."""

    at: datetime | None = None
    offset: int | None = None
    seq: int | None = None

    def bounds(self) -> dict[str, int]:
        """The stored-log bounds of this moment."""
        found: dict[str, int] = {}
        if self.at is not None:
            found["max_timestamp_us"] = micros(self.at)
        if self.offset is not None:
            found["max_offset"] = self.offset
        if self.seq is not None:
            found["max_seq"] = self.seq
        return found


def seq_time(conn: Connection, conversation_id: str, seq: int) -> datetime | None:
    """When event `seq` of the conversation was written (None: no such event yet)."""
    for event in stored_events(conn, conversation_id, max_seq=seq):
        if event.seq == seq:
            return event.timestamp
    return None


@dataclass
class AsOf:
    """The page's panels as of a moment."""

    moment: Moment
    events: list[dict[str, Any]]
    """The active branch then, as the view API shows events."""
    summary: dict[str, Any]
    status: dict[str, Any]
    operations: list[dict[str, Any]]
    last_time: datetime | None
    """The time of the last event folded (the ledger is cut there for an offset moment)."""


def as_of(
    conn: Connection,
    conversation_id: str,
    summary: dict[str, Any],
    operations: list[dict[str, Any]],
    moment: Moment,
) -> AsOf:
    """Timeline, stats, facts and effects of the conversation at `moment`."""
    log = list(stored_events(conn, conversation_id, **moment.bounds()))
    state = view.fold_all(view.initial(conversation_id), log)
    figures = stats.as_row(stats.fold_all(stats.initial(conversation_id), log)) if log else None
    cut = moment.at or (log[-1].timestamp if log else None)
    ops = [o for o in (_operation_then(op, cut) for op in operations) if o is not None]
    counts: dict[str, int] = {}
    for op in ops:
        counts[op["status"]] = counts.get(op["status"], 0) + 1
    statuses = [e for e in log if e.kind == "state_update"]
    execution = statuses[-1].execution_status if statuses else None
    answers = [e.seq for e in log if e.kind == "message" and e.source == "agent"]
    actions = [e.seq for e in log if e.kind == "action"]
    facts = {
        "agent_says_done": bool(answers) and max(answers) > max(actions, default=0),
        "run_loop_stopped": execution in RUN_STOPPED,
        "execution_status": execution,
        "effects_all_confirmed": counts.get("confirmed", 0) == len(ops),
        "effects": counts,
    }
    branch = view.active_branch(state)
    then = {
        **summary,
        "events": len(log),
        "view_length": len(branch),
        "last_seq": state.last_seq,
        "execution_status": execution,
        "stats": figures,
    }
    return AsOf(moment, [e.model_dump(mode="json") for e in branch], then, facts, ops, cut)


def _operation_then(op: dict[str, Any], cut: datetime | None) -> dict[str, Any] | None:
    """The operation as its ledger stood at `cut` (None: not proposed yet)."""
    if cut is None:
        return None
    ledger = [r for r in op.get("ledger") or [] if datetime.fromisoformat(r["timestamp"]) <= cut]
    if not ledger:
        return None
    status, resolution = "proposed", None
    for record in ledger:
        if record["kind"] == "effect_resolved":
            decision = record["record"].get("decision")
            status = _DECIDED.get(decision, status)
            resolution = {"decision": decision, "by": record["by"], "note": record["record"].get("note")}
        else:
            status = _STATUS_OF.get(record["kind"], status)
    attempts = sum(1 for r in ledger if r["kind"] == "effect_started")
    ended = [r for r in ledger if r["kind"] in TERMINAL]
    evidence = {**(op.get("evidence") or {}), "reason": None, "detail": None}
    if not ended:
        evidence.update(provider_receipt=None, receipt=None, observed=False)
    return {
        **op,
        "status": status,
        "attempt": attempts,
        "ledger": ledger,
        "resolution": resolution,
        "evidence": evidence,
    }
