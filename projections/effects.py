"""The pure state machine of one operation (DESIGN §1 Operation, §6, §7).

Inputs are data: effect-ledger records, Action/Observation events, provider receipts, lookup
answers and the current time (a deadline tick). `fold` folds the first three into an
`OperationState` (state machine as data: `TRANSITIONS`); `decide` (on a tick) and `on_lookup`
return the ledger transitions to publish. An emitted transition's id is derived from
operation_id + transition, so the re-emission of an at-least-once reconciler after a crash is
the *same* record, and readers, who remember the ids they applied, drop it.

Backfilled observations: seq belongs to the conversation's single writer, so the reconciler
never appends to a conversation's chain. It publishes EffectConfirmed(origin=receipt|lookup)
with the receipt and result; the runner's resume turns that evidence into the backfilled
ObservationEvent (`backfill_observation`) with the next seq.
"""

from __future__ import annotations

from datetime import datetime

from projections._effect_state import (
    RETRY_SAFE,
    TRANSITIONS,
    Decision,
    LookupResult,
    OperationState,
    OperationStatus,
    ReceiptEvidence,
    ReconcilePolicy,
    Transition,
    fold,
    initial,
    operation_id_of,
    transition_id,
    transition_of,
)
from projections.errors import IllegalTransitionError
from schemas.events import ObservationEvent
from schemas.records import EffectConfirmed, EffectFailed, EffectResolved, EffectUnknown, LedgerRecord

__all__ = [
    "RETRY_SAFE",
    "TRANSITIONS",
    "Decision",
    "IllegalTransitionError",
    "LookupResult",
    "OperationState",
    "OperationStatus",
    "ReceiptEvidence",
    "ReconcilePolicy",
    "Transition",
    "backfill_observation",
    "decide",
    "fold",
    "initial",
    "on_lookup",
    "operation_id_of",
    "transition_id",
    "transition_of",
]

RECONCILER = "reconciler"
"""`resolved_by` of the reconciler's own decisions."""


def decide(state: OperationState, now: datetime, policy: ReconcilePolicy, *, has_resolver: bool) -> Decision:
    """What a deadline tick at `now` does to an operation: publish, look it up, or nothing."""
    if not state.is_open:
        return Decision()
    receipt = state.receipt
    if receipt is not None and now >= receipt.timestamp + policy.receipt_grace:
        return Decision(emit=(_from_receipt(state, now),))
    due = state.reconcile_after is not None and now >= state.reconcile_after
    if state.status is not OperationStatus.EXECUTING or not due:
        return Decision()
    if has_resolver:
        return Decision(lookup=True)
    if state.effect_class in RETRY_SAFE:
        note = f"no outcome by the deadline; a {state.effect_class} retry cannot duplicate it"
        return Decision(emit=(_retry(state, now, note),))
    reason = "no receipt or observation by the deadline, and the tool has no lookup"
    return Decision(emit=(_unknown(state, now, reason, _evidence(state)),))


def on_lookup(
    state: OperationState,
    result: LookupResult,
    now: datetime,
    policy: ReconcilePolicy,
    failures: int = 0,
) -> tuple[LedgerRecord, ...]:
    """The transitions a lookup answer leads to; `failures` counts earlier 'unknown' answers."""
    if state.status is not OperationStatus.EXECUTING:
        return ()  # settled while the lookup ran
    if result.outcome == "found":
        return (_confirmed(state, now, "lookup", result.provider_receipt, result.result),)
    if result.outcome == "not_found":
        return (_retry(state, now, f"lookup: provider never saw the operation {result.detail}".strip()),)
    if failures + 1 < policy.max_lookups:
        return ()
    if state.effect_class in RETRY_SAFE:
        return (_retry(state, now, f"lookup failed {failures + 1}x; retry is safe: {result.detail}"),)
    evidence = f"{_evidence(state)}; lookup failed {failures + 1}x: {result.detail}"
    return (_unknown(state, now, "the provider cannot tell whether it happened", evidence),)


def backfill_observation(
    state: OperationState, *, event_id: str, seq: int, parent_id: str | None, timestamp: datetime
) -> ObservationEvent:
    """The ObservationEvent a settled operation's evidence stands for (seq from the writer).

    Raises:
        IllegalTransitionError: the operation is not confirmed or failed yet.
    """
    if state.status not in (OperationStatus.CONFIRMED, OperationStatus.FAILED):
        raise IllegalTransitionError(
            f"operation {state.operation_id}: cannot backfill an observation while {state.status}"
        )
    failed = state.status is OperationStatus.FAILED
    return ObservationEvent(
        id=event_id,
        conversation_id=state.conversation_id,
        tenant_id=state.tenant_id,
        seq=seq,
        timestamp=timestamp,
        source="environment",
        parent_id=parent_id,
        action_id=state.action_id,
        tool_name=state.tool_name,
        tool_call_id=state.tool_call_id,
        content=state.error if failed else state.result,
        is_error=failed,
        provider_receipt=state.provider_receipt,
        backfilled=True,
    )


def _base(state: OperationState, key: str, now: datetime) -> dict[str, object]:
    return {
        "id": transition_id(state.operation_id, key),
        "operation_id": state.operation_id,
        "conversation_id": state.conversation_id,
        "tenant_id": state.tenant_id,
        "timestamp": now,
    }


def _from_receipt(state: OperationState, now: datetime) -> LedgerRecord:
    receipt = state.receipt
    if receipt is None or receipt.status == "succeeded":
        return _confirmed(
            state, now, "receipt", receipt and receipt.provider_receipt, receipt and receipt.result
        )
    return EffectFailed(
        **_base(state, "failed", now),  # type: ignore[arg-type]
        error=f"provider {receipt.provider} receipt {receipt.provider_receipt}: failed {receipt.result}",
        origin="receipt",
    )


def _confirmed(
    state: OperationState, now: datetime, origin: str, receipt: str | None, result: str | None
) -> EffectConfirmed:
    return EffectConfirmed(
        **_base(state, "confirmed", now),  # type: ignore[arg-type]
        provider_receipt=receipt,
        result=result or "",
        origin=origin,  # type: ignore[arg-type]
    )


def _retry(state: OperationState, now: datetime, note: str) -> EffectResolved:
    return EffectResolved(
        **_base(state, f"retry@{state.attempt}", now),  # type: ignore[arg-type]
        decision="retry",
        resolved_by=RECONCILER,
        note=note,
    )


def _unknown(state: OperationState, now: datetime, reason: str, evidence: str) -> EffectUnknown:
    return EffectUnknown(
        **_base(state, f"unknown@{state.attempt}", now),  # type: ignore[arg-type]
        reason=reason,
        evidence=evidence,
        origin="reconciler",
    )


def _evidence(state: OperationState) -> str:
    deadline = state.reconcile_after.isoformat() if state.reconcile_after else "none"
    return (
        f"{state.effect_class} tool {state.tool_name or '?'} attempt {state.attempt}, "
        f"executing past its deadline {deadline}; observation landed: {state.observed}; "
        f"receipt: {state.receipt.provider_receipt if state.receipt else 'none'}"
    )
