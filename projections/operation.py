"""The one state machine of an operation (DESIGN §1 Operation, §6, §7): states, transitions, fold.

The runtime's resume, the reconciler and the effects read side fold the same records with this
module, so they cannot disagree on whether an action may run again. Transitions are data
(`TRANSITIONS`). What to do with an operation that has no outcome (the retry rule, the attempt
cap, the recovery step) is in `convdb.projections.settlement`, written once for the same users.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict

from convdb.projections.errors import IllegalTransitionError
from convdb.projections.tenancy import check_owner
from convdb.schemas._types import EffectClass, ReceiptStatus, Resolution
from convdb.schemas.events import ActionEvent, ObservationEvent
from convdb.schemas.records import (
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
        """Settled: never executed again. Failed still yields to proof of success (see TRANSITIONS)."""
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

_ALL: tuple[Transition, ...] = (
    "proposed", "started", "confirmed", "failed", "unknown",
    "resolved:confirmed", "resolved:failed", "resolved:retry",
)  # fmt: skip

# Only the conversation's single writer proposes, and it proposes again only when it did not
# read its own earlier proposal (a restore whose tail starts after it). The intent is the same
# (operation_id names the action), so a repeated proposal changes nothing: going back to
# `proposed` would hide an attempt in flight from the deadline and let resume run it again.
Table = dict[tuple[OperationStatus | None, Transition], OperationStatus]

_REPEATED_PROPOSAL: Table = {(s, "proposed"): s for s in (P, E, U, C, F)}

# Records arriving after an outcome come from writers that had not seen it yet (the at-least-once
# reconciler, a runner that restored before the reconciler's record, a human deciding on a
# lagging read model). They are not poison, so they are legal, and they do not change the outcome.
# Except proof of success: an effect that happened cannot be undone by an earlier error report,
# so a receipt, a lookup or a human saying "confirmed" turns `failed` into `confirmed`
# (otherwise provider mutations would not equal confirmed operations).
_SETTLED: Table = {(s, t): s for s in (C, F) for t in _ALL}
_SETTLED |= {(F, "confirmed"): C, (F, "resolved:confirmed"): C}

TRANSITIONS: Mapping[tuple[OperationStatus | None, Transition], OperationStatus] = {
    (None, "proposed"): P,
    **_REPEATED_PROPOSAL,
    **_SETTLED,
    (P, "started"): E,
    (P, "confirmed"): C,  # a receipt can prove a call whose EffectStarted is still in flight
    (P, "failed"): F,
    (P, "unknown"): U,  # a decision taken on `executing` before a retry was approved: a human looks
    (P, "resolved:retry"): P,  # the runner records the human's retry approval again
    (E, "started"): E,  # a retry with the same idempotency key (attempt + 1)
    (E, "confirmed"): C,
    (E, "failed"): F,
    (E, "unknown"): U,
    (E, "resolved:retry"): P,  # the reconciler's lookup proved it was not done
    (U, "confirmed"): C,  # evidence (receipt, lookup) arrived after all
    (U, "failed"): F,
    (U, "unknown"): U,
    (U, "resolved:retry"): P,
    # A started attempt is newer than the conclusion that nobody knows what happened (the runner's
    # lookup proved it not done and retried, while the reconciler had marked it unknown): the
    # attempt is in flight again, with a new deadline, and recovery applies the retry rules anew.
    (U, "started"): E,
    # A resolution is someone's statement about the world (a human who checked, or a decision on
    # an `unknown` that a later attempt overtook). It settles any open operation: nothing re-runs.
    (P, "resolved:confirmed"): C,
    (P, "resolved:failed"): F,
    (E, "resolved:confirmed"): C,
    (E, "resolved:failed"): F,
    (U, "resolved:confirmed"): C,
    (U, "resolved:failed"): F,
}
"""Every legal (status, transition) → status. Only a record about an operation never proposed is
illegal (raises `IllegalTransitionError`): that is data no writer produces."""


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
    """Highest EffectStarted attempt folded (the attempt cap reads it)."""
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


_RESOLVED: Mapping[Resolution, Transition] = {
    "confirmed": "resolved:confirmed",
    "failed": "resolved:failed",
    "retry": "resolved:retry",
}
_KINDS: Mapping[type, Transition] = {
    EffectProposed: "proposed",
    EffectStarted: "started",
    EffectConfirmed: "confirmed",
    EffectFailed: "failed",
    EffectUnknown: "unknown",
}


def transition_of(record: LedgerRecord) -> Transition:
    """The transition a ledger record asks for."""
    if isinstance(record, EffectResolved):
        return _RESOLVED[record.decision]
    return _KINDS[type(record)]


def fold(state: OperationState, record: object) -> OperationState:
    """Fold one record about this operation into its state.

    Raises:
        IllegalTransitionError: a ledger record about an operation that was never proposed.
        TenantMismatchError: a record names another tenant than the operation's.
    """
    if isinstance(record, LedgerRecord):
        return _apply_ledger(state, record)
    if isinstance(record, ActionEvent | ObservationEvent):
        state = _event_owner(state, record)
    if isinstance(record, ActionEvent):
        return state.model_copy(update=_intent(record))
    if isinstance(record, ObservationEvent):
        return state.model_copy(update={"observed": True, "action_id": record.action_id})
    if isinstance(record, Receipt):
        return _apply_receipt(state, record)
    return state


def _event_owner(state: OperationState, event: ActionEvent | ObservationEvent) -> OperationState:
    """Refuse an event of another tenant than the one the operation's ledger names.

    Before the ledger has named one, what a record of another tenant said (a parked receipt, an
    event) is forgotten: the events and the ledger come on different topics, in either order,
    and the ledger decides when it comes (`_apply_ledger`).
    """
    if not state.tenant_id or event.tenant_id == state.tenant_id:
        return state
    if state.status is not None:
        check_owner(state.tenant_id, event, f"operation {state.operation_id[:80]!r} of")
    return initial(state.operation_id)


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
    if state.status is not None:
        check_owner(state.tenant_id, receipt, f"operation {receipt.operation_id[:80]!r} of")
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
    if state.tenant_id and record.tenant_id != state.tenant_id:
        if state.status is not None:
            check_owner(state.tenant_id, record, f"operation {record.operation_id[:80]!r} of")
        # Only records before the ledger (a parked receipt, an event) named that tenant, and the
        # ledger is the authority: forget what they said.
        state = initial(state.operation_id)
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
    if transition == "proposed" and state.status is not None:
        return state.model_copy(update=update)
    if state.status is not None and state.status.is_terminal and new_status is state.status:
        # A second witness or a stale decision: keep the settled outcome's details.
        return state.model_copy(update=update)
    if transition == "resolved:retry" and state.status is P and state.decision == "retry":
        # The runner recording the retry a human already put on the ledger (decisions are only
        # taken on `unknown`): keep who decided it and their note.
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
            return {
                "attempt": max(state.attempt, record.attempt),
                "reconcile_after": _deadline(state, record),
            }
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
    return max(state.reconcile_after, later(started.timestamp, state.reconcile_after - state.proposed_at))


END_OF_TIME = datetime.max.replace(tzinfo=UTC)
"""The latest moment a deadline can name: one past it saturates here (it is never due)."""


def later(moment: datetime, delta: timedelta) -> datetime:
    """`moment + delta`, saturated to the range of datetimes (records may name any timestamp)."""
    try:
        return moment + delta
    except OverflowError:
        return END_OF_TIME if delta > timedelta(0) else datetime.min.replace(tzinfo=UTC)
