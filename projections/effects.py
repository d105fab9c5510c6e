"""The effects projection: the reconciler's decisions and the backfilled observation (DESIGN §7, §8).

The state machine itself is `convdb.projections.operation` (re-exported here): `fold` folds ledger
records, Action/Observation events and provider receipts into an `OperationState`. This module
adds what the reconciler does with it: `decide` (on a deadline tick) and `on_lookup` return the
ledger transitions to publish, with the rules of `convdb.projections.settlement`. An emitted
transition's id is derived from operation_id + transition, so the re-emission of an
at-least-once reconciler after a crash is the *same* record, and readers, who remember the ids
they applied, drop it.

Backfilled observations: seq belongs to the conversation's single writer, so the reconciler
never appends to a conversation's chain. It publishes EffectConfirmed(origin=receipt|lookup)
with the receipt and result; the runner's resume turns that evidence into the backfilled
ObservationEvent (`backfill_observation`) with the next seq.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from convdb.projections.errors import IllegalTransitionError
from convdb.projections.operation import (
    TRANSITIONS,
    OperationState,
    OperationStatus,
    ReceiptEvidence,
    Transition,
    fold,
    initial,
    later,
    operation_id_of,
    transition_of,
)
from convdb.projections.settlement import RETRY_SAFE, LookupResult, Verdict, settle
from convdb.schemas._types import LedgerOrigin
from convdb.schemas.events import ObservationEvent
from convdb.schemas.records import EffectConfirmed, EffectFailed, EffectResolved, EffectUnknown, LedgerRecord

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
    "outcome_text",
    "transition_id",
    "transition_of",
]

RECONCILER = "reconciler"
"""`resolved_by` of the reconciler's own decisions."""

_ID_NAMESPACE = uuid.UUID("6f1c8f0e-7d1b-4c35-9a43-2f5e0c3b8a11")


class ReconcilePolicy(BaseModel):
    """How patient the reconciler is; passed in as data."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    receipt_grace: timedelta = timedelta(seconds=2)
    """How long a receipt waits for the runner's own confirmation before it is acted on."""
    max_lookups: int = 3
    """Lookups that may answer 'unknown' before the reconciler decides without the provider."""


@dataclass(frozen=True)
class Decision:
    """What a tick asks for: transitions to publish, and/or a lookup of the provider."""

    emit: tuple[LedgerRecord, ...] = ()
    lookup: bool = False


def transition_id(operation_id: str, key: str) -> str:
    """The id of the reconciler's transition `key` for an operation (same input, same id)."""
    return str(uuid.uuid5(_ID_NAMESPACE, f"{operation_id}#{key}"))


def decide(state: OperationState, now: datetime, policy: ReconcilePolicy, *, has_resolver: bool) -> Decision:
    """What a deadline tick at `now` does to an operation: publish, look it up, or nothing."""
    if not state.is_open:
        return Decision()
    receipt = state.receipt
    if receipt is not None and now >= later(receipt.timestamp, policy.receipt_grace):
        return Decision(emit=(_from_receipt(state, now),))
    due = state.reconcile_after is not None and now >= state.reconcile_after
    if state.status is not OperationStatus.EXECUTING or not due:
        return Decision()
    if has_resolver:
        return Decision(lookup=True)
    return Decision(emit=_emit(state, settle(state, None), now, "no receipt or observation by the deadline"))


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
    verdict = settle(state, result, may_ask_again=failures + 1 < policy.max_lookups)
    why = "the provider cannot tell whether it happened" if result.outcome == "unknown" else "lookup"
    return _emit(state, verdict, now, why, lookups=failures + 1)


def _emit(
    state: OperationState, verdict: Verdict, now: datetime, why: str, lookups: int = 0
) -> tuple[LedgerRecord, ...]:
    if verdict.action == "confirm":
        return (_confirmed(state, now, "lookup", verdict.provider_receipt, verdict.result),)
    if verdict.action == "retry":
        return (_retry(state, now, verdict.detail),)
    if verdict.action == "ask_again":
        return ()
    tried = f" ({lookups} lookup(s))" if lookups else ""
    reason = f"{why}{tried}; {verdict.detail}"
    return (_unknown(state, now, reason, f"{_evidence(state)}; {verdict.detail}"),)


def outcome_text(state: OperationState) -> str:
    """What a settled operation's observation says: the result, the error, or the resolution's note."""
    if state.status is OperationStatus.FAILED:
        return state.error or state.note or "failed"
    return state.result or state.note or f"confirmed ({state.provider_receipt})"


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
        content=outcome_text(state),
        is_error=state.status is OperationStatus.FAILED,
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
    if receipt is None:
        return _confirmed(state, now, "receipt", None, None)
    if receipt.status == "succeeded":
        return _confirmed(state, now, "receipt", receipt.provider_receipt, receipt.result)
    error = f"provider {receipt.provider} receipt {receipt.provider_receipt}: failed {receipt.result}"
    return EffectFailed.model_validate({**_base(state, "failed", now), "error": error, "origin": "receipt"})


def _confirmed(
    state: OperationState, now: datetime, origin: LedgerOrigin, receipt: str | None, result: str | None
) -> EffectConfirmed:
    return EffectConfirmed.model_validate(
        {
            **_base(state, "confirmed", now),
            "provider_receipt": receipt,
            "result": result or "",
            "origin": origin,
        }
    )


def _retry(state: OperationState, now: datetime, note: str) -> EffectResolved:
    return EffectResolved.model_validate(
        {
            **_base(state, f"retry@{state.attempt}", now),
            "decision": "retry",
            "resolved_by": RECONCILER,
            "note": note,
        }
    )


def _unknown(state: OperationState, now: datetime, reason: str, evidence: str) -> EffectUnknown:
    return EffectUnknown.model_validate(
        {
            **_base(state, f"unknown@{state.attempt}", now),
            "reason": reason,
            "evidence": evidence,
            "origin": "reconciler",
        }
    )


def _evidence(state: OperationState) -> str:
    deadline = state.reconcile_after.isoformat() if state.reconcile_after else "none"
    return (
        f"{state.effect_class} tool {state.tool_name or '?'} attempt {state.attempt}, "
        f"executing past its deadline {deadline}; observation landed: {state.observed}; "
        f"receipt: {state.receipt.provider_receipt if state.receipt else 'none'}"
    )
