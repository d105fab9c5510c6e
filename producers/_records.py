"""Builders of the ledger records and observations the effect protocol writes."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from producers.ledger import open_operations
from producers.tools.base import Operation, ToolResult
from schemas import (
    ActionEvent,
    EffectConfirmed,
    EffectFailed,
    EffectProposed,
    EffectStarted,
    EffectUnknown,
    ObservationEvent,
    Snapshot,
)
from schemas._types import LedgerOrigin

if TYPE_CHECKING:
    from producers.conversation import Conversation


def _ledger(conv: Conversation, action: ActionEvent) -> dict[str, Any]:
    return {
        "id": str(uuid.uuid4()),
        "operation_id": action.operation_id,
        "conversation_id": conv.conversation_id,
        "tenant_id": conv.tenant_id,
        "timestamp": datetime.now(UTC),
    }


def proposed(conv: Conversation, action: ActionEvent) -> EffectProposed:
    """EffectProposed for an action (written together with, or right after, the ActionEvent)."""
    return EffectProposed(
        **_ledger(conv, action),
        action_id=action.id,
        tool_name=action.tool_name,
        intent_hash=action.intent_hash,
        target=action.target,
        effect_class=action.effect_class,
        reconcile_after=datetime.now(UTC) + timedelta(seconds=conv.runtime.reconcile_after_s),
    )


def started(conv: Conversation, action: ActionEvent, attempt: int) -> EffectStarted:
    """EffectStarted: the provider call is about to be made."""
    return EffectStarted(**_ledger(conv, action), attempt=attempt)


def confirmed(
    conv: Conversation, action: ActionEvent, result: ToolResult, origin: LedgerOrigin = "runner"
) -> EffectConfirmed:
    """EffectConfirmed with the provider's receipt."""
    return EffectConfirmed(
        **_ledger(conv, action),
        provider_receipt=result.provider_receipt,
        result=result.content,
        origin=origin,
    )


def failed(
    conv: Conversation,
    action: ActionEvent,
    error: str,
    *,
    retryable: bool = False,
    origin: LedgerOrigin = "runner",
) -> EffectFailed:
    """EffectFailed with the error."""
    return EffectFailed(**_ledger(conv, action), error=error, retryable=retryable, origin=origin)


def unknown(conv: Conversation, action: ActionEvent, reason: str, evidence: str) -> EffectUnknown:
    """EffectUnknown: a human must decide."""
    return EffectUnknown(**_ledger(conv, action), reason=reason, evidence=evidence)


def observation(
    conv: Conversation, action: ActionEvent, result: ToolResult, *, backfilled: bool = False
) -> ObservationEvent:
    """The ObservationEvent of an action."""
    return conv.new(
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


def operation(conv: Conversation, action: ActionEvent, arguments: dict[str, Any], attempt: int) -> Operation:
    """The Operation handed to a tool (arguments with secrets revealed)."""
    return Operation(
        operation_id=action.operation_id,
        conversation_id=conv.conversation_id,
        tenant_id=conv.tenant_id,
        action_id=action.id,
        tool_name=action.tool_name,
        arguments=arguments,
        attempt=attempt,
    )


def snapshot(conv: Conversation) -> Snapshot:
    """The base-state snapshot: status, stats, secret names, open operations, offsets."""
    partition, offset = conv.events_position
    return Snapshot(
        conversation_id=conv.conversation_id,
        tenant_id=conv.tenant_id,
        timestamp=datetime.now(UTC),
        last_seq=conv.state.last_seq,
        last_event_id=conv.state.log[-1].id if len(conv.state.log) else None,
        active_leaf_id=conv.state.active_leaf,
        events_partition=partition,
        events_offset=offset,
        execution_status=conv.status,
        agent_json=conv.agent.model_dump_json(),
        stats_json=json.dumps(conv.stats.as_dict()),
        secret_names=conv.secrets.names,
        inbox_offset=conv.inbox_offset,
        open_operations=tuple(open_operations(conv.ledger)),
    )
