"""The effect ledger as the runtime sees it: operation states folded from ledger records.

Live execution and `resume` share this fold, so both take the same decision for the same
ledger, and a transition someone else (the reconciler) already recorded is never repeated.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from schemas import (
    EffectConfirmed,
    EffectFailed,
    EffectProposed,
    EffectResolved,
    EffectStarted,
    EffectUnknown,
    LedgerRecord,
    Receipt,
)
from schemas._types import EffectClass, Resolution

OPEN_STATUSES = frozenset({"proposed", "executing", "unknown"})
"""Operation statuses that still need an outcome."""


@dataclass(frozen=True)
class OperationState:
    """What the ledger says about one operation."""

    operation_id: str
    action_id: str
    tool_name: str
    effect_class: EffectClass
    status: str = "proposed"
    attempts: int = 0
    provider_receipt: str | None = None
    result: str = ""
    error: str = ""
    resolution: Resolution | None = None
    receipt: Receipt | None = None

    @property
    def open(self) -> bool:
        """True while the operation has no confirmed/failed outcome."""
        return self.status in OPEN_STATUSES


def fold_ledger(ops: dict[str, OperationState], record: LedgerRecord) -> dict[str, OperationState]:
    """Apply one ledger record (in place, returns `ops`); outcomes are final once recorded."""
    current = ops.get(record.operation_id)
    if isinstance(record, EffectProposed):
        if current is None:
            ops[record.operation_id] = OperationState(
                record.operation_id, record.action_id, record.tool_name, record.effect_class
            )
        return ops
    if current is None:
        return ops  # a transition of an operation we never saw proposed: not ours to act on
    final = current.status in ("confirmed", "failed")
    match record:
        case EffectStarted(attempt=attempt):
            status = current.status if final or current.status == "unknown" else "executing"
            ops[record.operation_id] = replace(
                current, status=status, attempts=max(attempt, current.attempts)
            )
        case EffectConfirmed():
            ops[record.operation_id] = replace(
                current, status="confirmed", provider_receipt=record.provider_receipt, result=record.result
            )
        case EffectFailed():
            if not final:
                ops[record.operation_id] = replace(current, status="failed", error=record.error)
        case EffectUnknown():
            if not final:
                ops[record.operation_id] = replace(current, status="unknown", error=record.reason)
        case EffectResolved(decision=decision):
            ops[record.operation_id] = _resolved(current, decision, record.note)
    return ops


def _resolved(current: OperationState, decision: Resolution, note: str) -> OperationState:
    if current.status in ("confirmed", "failed"):
        return replace(current, resolution=current.resolution or decision)
    if decision == "confirmed":
        return replace(current, status="confirmed", result=note, resolution=decision)
    if decision == "failed":
        return replace(current, status="failed", error=note or "resolved as failed", resolution=decision)
    return replace(current, status="proposed", resolution=decision)


def with_receipt(ops: dict[str, OperationState], receipt: Receipt) -> dict[str, OperationState]:
    """Attach a provider receipt to its operation (in place)."""
    current = ops.get(receipt.operation_id)
    if current is not None:
        ops[receipt.operation_id] = replace(current, receipt=receipt)
    return ops


class Step(enum.Enum):
    """What resume must do for one action that has no observation yet."""

    EXECUTE = "execute"
    """Never started (or a human approved a retry): run it now."""
    BACKFILL = "backfill"
    """The outcome is known (ledger or receipt): publish the missing observation."""
    SETTLE = "settle"
    """Started with no outcome: look it up, retry if provably not done, else ask a human."""
    WAIT_HUMAN = "wait_human"
    """Already marked unknown: a human decides (never re-marked, never re-run)."""


def next_step(op: OperationState | None) -> Step:
    """The recovery step for an unobserved action, given its ledger state (DESIGN §6)."""
    if op is None:
        return Step.EXECUTE
    if op.status in ("confirmed", "failed"):
        return Step.BACKFILL
    if op.receipt is not None:
        return Step.BACKFILL
    if op.status == "proposed":
        return Step.EXECUTE
    if op.status == "unknown":
        return Step.WAIT_HUMAN
    return Step.SETTLE


def retry_allowed(effect_class: EffectClass, provably_not_done: bool) -> bool:
    """May the operation be called again with the same key?

    idempotent: set-to-state, twice equals once; keyed: the provider deduplicates by key;
    irreversible: only when a lookup proved it was not done.
    """
    if effect_class in ("idempotent", "keyed"):
        return True
    return effect_class == "irreversible" and provably_not_done
