"""Operation state and its fold: the data half of `projections.effects` (see there)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict

from projections.errors import IllegalTransitionError
from schemas._types import EffectClass, ReceiptStatus, Resolution
from schemas.events import ActionEvent, ObservationEvent
from schemas.records import (
    EffectConfirmed,
    EffectFailed,
    EffectProposed,
    EffectResolved,
    EffectStarted,
    EffectUnknown,
    LedgerRecord,
    Receipt,
)


class OperationStatus(StrEnum):
    """Where an operation is: proposed → executing → confirmed | failed | unknown."""

    PROPOSED = "proposed"
    EXECUTING = "executing"
    CONFIRMED = "confirmed"
    FAILED = "failed"
    UNKNOWN = "unknown"

    @property
    def is_terminal(self) -> bool:
        """Confirmed and failed never change; unknown waits for evidence or a human."""
        return self in (OperationStatus.CONFIRMED, OperationStatus.FAILED)


P, E, C, F, U = (
    OperationStatus.PROPOSED,
    OperationStatus.EXECUTING,
    OperationStatus.CONFIRMED,
    OperationStatus.FAILED,
    OperationStatus.UNKNOWN,
)

Transition = Literal[
    "proposed", "started", "confirmed", "failed", "unknown",
    "resolved:confirmed", "resolved:failed", "resolved:retry",
]  # fmt: skip
"""What a ledger record asks for; `resolved:*` carries the decision."""

TRANSITIONS: Mapping[tuple[OperationStatus | None, Transition], OperationStatus] = {
    (None, "proposed"): P,
    (P, "started"): E,
    (P, "confirmed"): C,  # a receipt can prove a call whose EffectStarted is still in flight
    (P, "failed"): F,
    (P, "unknown"): U,
    (P, "resolved:retry"): P,  # the runner records the human's retry approval again
    (E, "started"): E,  # a retry with the same idempotency key (attempt + 1)
    (E, "confirmed"): C,
    (E, "failed"): F,
    (E, "unknown"): U,
    (E, "resolved:retry"): P,  # the reconciler's lookup proved it was not done
    (U, "resolved:confirmed"): C,
    (U, "resolved:failed"): F,
    (U, "resolved:retry"): P,
    (U, "confirmed"): C,  # evidence (receipt, lookup) arrived after all
    (U, "failed"): F,
    (U, "unknown"): U,
    (U, "started"): E,  # the runner's own lookup proved it was not done and retried
    # Two witnesses of one outcome (runner and receipt) agree: nothing changes.
    (C, "confirmed"): C,
    (C, "resolved:confirmed"): C,
    (F, "failed"): F,
    (F, "resolved:failed"): F,
    # A reconciler decision made on a state the runner has since settled loses to the outcome.
    (C, "unknown"): C,
    (C, "resolved:retry"): C,
    (F, "unknown"): F,
    (F, "resolved:retry"): F,
}
"""Every legal (status, transition) → status; anything else raises `IllegalTransitionError`."""

RETRY_SAFE: frozenset[EffectClass] = frozenset({"idempotent", "keyed"})
"""Effect classes a retry cannot duplicate (set-to-state, or the provider honours the key)."""

_ID_NAMESPACE = uuid.UUID("6f1c8f0e-7d1b-4c35-9a43-2f5e0c3b8a11")


class ReceiptEvidence(BaseModel):
    """What a provider receipt said about an operation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str
    provider_receipt: str
    status: ReceiptStatus
    result: str = ""
    timestamp: AwareDatetime


class OperationState(BaseModel):
    """Everything known about one operation; `status` None until its EffectProposed is folded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    operation_id: str
    conversation_id: str = ""
    tenant_id: str = ""
    action_id: str = ""
    tool_name: str = ""
    tool_call_id: str = ""
    arguments: str = ""
    intent_hash: str = ""
    target: str | None = None
    effect_class: EffectClass | None = None
    status: OperationStatus | None = None
    attempt: int = 0
    proposed_at: AwareDatetime | None = None
    reconcile_after: AwareDatetime | None = None
    provider_receipt: str | None = None
    result: str = ""
    error: str = ""
    reason: str = ""
    evidence: str = ""
    decision: Resolution | None = None
    resolved_by: str | None = None
    note: str = ""
    observed: bool = False
    receipt: ReceiptEvidence | None = None
    applied: tuple[str, ...] = ()
    """Ids of the ledger records folded: a duplicate (at-least-once) changes nothing."""
    updated_at: AwareDatetime | None = None

    @property
    def is_open(self) -> bool:
        """Known and not settled: proposed, executing or unknown."""
        return self.status is not None and not self.status.is_terminal


class ReconcilePolicy(BaseModel):
    """How patient the reconciler is; passed in as data."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    receipt_grace: timedelta = timedelta(seconds=2)
    """How long a receipt waits for the runner's own confirmation before it is acted on."""
    max_lookups: int = 3
    """Lookups that may answer 'unknown' before the reconciler gives up on the provider."""


class LookupResult(BaseModel):
    """A resolver's answer: found (with receipt/result), not_found (provably not done), unknown."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    outcome: Literal["found", "not_found", "unknown"]
    provider_receipt: str | None = None
    result: str = ""
    detail: str = ""


@dataclass(frozen=True)
class Decision:
    """What a tick asks for: transitions to publish, and/or a lookup of the provider."""

    emit: tuple[LedgerRecord, ...] = ()
    lookup: bool = False


def initial(operation_id: str) -> OperationState:
    """The state of an operation nothing is known about."""
    return OperationState(operation_id=operation_id)


def operation_id_of(record: object) -> str | None:
    """The operation a record is about, or None when it is about none."""
    if isinstance(record, LedgerRecord | Receipt):
        return record.operation_id
    if isinstance(record, ActionEvent):
        return None if record.effect_class == "read_only" else record.operation_id
    if isinstance(record, ObservationEvent):
        return f"{record.conversation_id}/{record.action_id}"
    return None


def transition_of(record: LedgerRecord) -> Transition:
    """The transition a ledger record asks for."""
    if isinstance(record, EffectResolved):
        return f"resolved:{record.decision}"  # type: ignore[return-value]
    return {
        EffectProposed: "proposed",
        EffectStarted: "started",
        EffectConfirmed: "confirmed",
        EffectFailed: "failed",
        EffectUnknown: "unknown",
    }[type(record)]  # type: ignore[return-value]


def transition_id(operation_id: str, key: str) -> str:
    """The id of the reconciler's transition `key` for an operation (same input, same id)."""
    return str(uuid.uuid5(_ID_NAMESPACE, f"{operation_id}#{key}"))


def fold(state: OperationState, record: object) -> OperationState:
    """Fold one record about this operation into its state.

    Raises:
        IllegalTransitionError: a ledger record asks for a transition `TRANSITIONS` forbids.
    """
    if isinstance(record, LedgerRecord):
        return _apply_ledger(state, record)
    if isinstance(record, ActionEvent):
        return state.model_copy(update=_intent(record))
    if isinstance(record, ObservationEvent):
        return state.model_copy(update={"observed": True, "action_id": record.action_id})
    if isinstance(record, Receipt):
        return _apply_receipt(state, record)
    return state


def _intent(event: ActionEvent) -> dict[str, object]:
    return {
        "conversation_id": event.conversation_id,
        "tenant_id": event.tenant_id,
        "action_id": event.id,
        "tool_name": event.tool_name,
        "tool_call_id": event.tool_call_id,
        "arguments": event.arguments,
        "intent_hash": event.intent_hash,
        "target": event.target,
        "effect_class": event.effect_class,
    }


def _apply_receipt(state: OperationState, receipt: Receipt) -> OperationState:
    if state.receipt is not None and state.receipt.provider_receipt == receipt.provider_receipt:
        return state
    evidence = ReceiptEvidence(
        provider=receipt.provider,
        provider_receipt=receipt.provider_receipt,
        status=receipt.status,
        result=receipt.result,
        timestamp=receipt.timestamp,
    )
    update: dict[str, object] = {"receipt": evidence}
    if not state.conversation_id:
        update.update(conversation_id=receipt.conversation_id, tenant_id=receipt.tenant_id)
    return state.model_copy(update=update)


def _apply_ledger(state: OperationState, record: LedgerRecord) -> OperationState:
    if record.id in state.applied:
        return state
    transition = transition_of(record)
    new_status = TRANSITIONS.get((state.status, transition))
    if new_status is None:
        raise IllegalTransitionError(
            f"operation {record.operation_id}: {transition} is not allowed when "
            f"{state.status or 'not proposed'} (ledger record {record.id})"
        )
    update: dict[str, object] = {
        "status": new_status,
        "applied": (*state.applied, record.id),
        "updated_at": record.timestamp,
        "conversation_id": record.conversation_id,
        "tenant_id": record.tenant_id,
    }
    if state.status is not None and state.status.is_terminal:
        # A second witness or a stale decision: keep the settled outcome's details.
        return state.model_copy(update=update)
    update.update(_ledger_fields(state, record))
    return state.model_copy(update=update)


def _ledger_fields(state: OperationState, record: LedgerRecord) -> dict[str, object]:
    match record:
        case EffectProposed():
            return {
                "action_id": record.action_id,
                "tool_name": record.tool_name,
                "intent_hash": record.intent_hash,
                "target": record.target,
                "effect_class": record.effect_class,
                "proposed_at": record.timestamp,
                "reconcile_after": record.reconcile_after,
            }
        case EffectStarted():
            return {"attempt": record.attempt, "reconcile_after": _deadline(state, record)}
        case EffectConfirmed():
            return {"provider_receipt": record.provider_receipt, "result": record.result}
        case EffectFailed():
            return {"error": record.error}
        case EffectUnknown():
            return {"reason": record.reason, "evidence": record.evidence}
        case EffectResolved():
            return {"decision": record.decision, "resolved_by": record.resolved_by, "note": record.note}
    return {}


def _deadline(state: OperationState, started: EffectStarted) -> datetime | None:
    """A retry gets as long as the first attempt had: started + (reconcile_after - proposed)."""
    if state.reconcile_after is None or state.proposed_at is None or started.attempt <= 1:
        return state.reconcile_after
    return max(state.reconcile_after, started.timestamp + (state.reconcile_after - state.proposed_at))
