"""Builders of the ledger records and observations the effect protocol writes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from convdb.producers.tools.base import Operation, ToolResult
from convdb.producers.writer import ConversationWriter
from convdb.projections.effects import transition_id
from convdb.schemas import (
    ActionEvent,
    EffectConfirmed,
    EffectFailed,
    EffectProposed,
    EffectResolved,
    EffectStarted,
    EffectUnknown,
    ObservationEvent,
)
from convdb.schemas._types import LedgerOrigin, Resolution


def _ledger(writer: ConversationWriter, action: ActionEvent) -> dict[str, Any]:
    return {
        "id": str(uuid.uuid4()),
        "operation_id": action.operation_id,
        "conversation_id": writer.conversation_id,
        "tenant_id": writer.tenant_id,
        "timestamp": datetime.now(UTC),
    }


def proposed(writer: ConversationWriter, action: ActionEvent, reconcile_after_s: float) -> EffectProposed:
    """EffectProposed for an action (written together with, or right after, the ActionEvent)."""
    return EffectProposed(
        **_ledger(writer, action),
        action_id=action.id,
        tool_name=action.tool_name,
        intent_hash=action.intent_hash,
        target=action.target,
        effect_class=action.effect_class,
        reconcile_after=datetime.now(UTC) + timedelta(seconds=reconcile_after_s),
    )


def started(writer: ConversationWriter, action: ActionEvent, attempt: int) -> EffectStarted:
    """EffectStarted: the provider call is about to be made."""
    return EffectStarted(**_ledger(writer, action), attempt=attempt)


def confirmed(
    writer: ConversationWriter, action: ActionEvent, result: ToolResult, origin: LedgerOrigin = "runner"
) -> EffectConfirmed:
    """EffectConfirmed with the provider's receipt."""
    return EffectConfirmed(
        **_ledger(writer, action),
        provider_receipt=result.provider_receipt,
        result=result.content,
        origin=origin,
    )


def failed(
    writer: ConversationWriter, action: ActionEvent, error: str, origin: LedgerOrigin = "runner"
) -> EffectFailed:
    """EffectFailed with the error."""
    return EffectFailed(**_ledger(writer, action), error=error, origin=origin)


def outcome(
    writer: ConversationWriter, action: ActionEvent, result: ToolResult, origin: LedgerOrigin = "runner"
) -> EffectConfirmed | EffectFailed:
    """EffectFailed for an error result, EffectConfirmed otherwise."""
    if result.is_error:
        return failed(writer, action, result.content, origin)
    return confirmed(writer, action, result, origin)


def learned(
    writer: ConversationWriter, action: ActionEvent, result: ToolResult, origin: LedgerOrigin
) -> EffectConfirmed | EffectFailed:
    """The outcome learned from evidence (a lookup, a receipt), with the reconciler's id for it.

    The reconciler may learn the same outcome from the same evidence at the same time (its table
    lags what the runner wrote): with one id for the transition, readers keep one of the two.
    """
    record = outcome(writer, action, result, origin)
    key = "failed" if result.is_error else "confirmed"
    return record.model_copy(update={"id": transition_id(action.operation_id, key)})


def unknown(writer: ConversationWriter, action: ActionEvent, reason: str, evidence: str) -> EffectUnknown:
    """EffectUnknown: a human must decide."""
    return EffectUnknown(**_ledger(writer, action), reason=reason, evidence=evidence)


def resolved(
    writer: ConversationWriter, action: ActionEvent, decision: Resolution, resolved_by: str, note: str
) -> EffectResolved:
    """EffectResolved: someone's decision on the operation."""
    return EffectResolved(**_ledger(writer, action), decision=decision, resolved_by=resolved_by, note=note)


def observation(
    writer: ConversationWriter, action: ActionEvent, result: ToolResult, *, backfilled: bool = False
) -> ObservationEvent:
    """The ObservationEvent of an action (call inside `commit`'s build)."""
    return writer.new(
        ObservationEvent,
        source="environment",
        action_id=action.id,
        tool_name=action.tool_name,
        tool_call_id=action.tool_call_id,
        content=result.content,
        is_error=result.is_error,
        provider_receipt=result.provider_receipt,
        backfilled=backfilled,
    )


def operation(
    writer: ConversationWriter, action: ActionEvent, arguments: dict[str, Any], attempt: int
) -> Operation:
    """The Operation handed to a tool (arguments with secrets revealed)."""
    return Operation(
        operation_id=action.operation_id,
        conversation_id=writer.conversation_id,
        tenant_id=writer.tenant_id,
        action_id=action.id,
        tool_name=action.tool_name,
        arguments=arguments,
        attempt=attempt,
    )
