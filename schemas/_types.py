"""Avro enums as `Literal` types, and the frozen base model every record mirrors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

EventSource = Literal["user", "agent", "environment", "hook"]
"""Who produced an event; never inferred from the LLM role it is projected to."""

MessageRole = Literal["user", "assistant", "system"]
"""The LLM role a message is projected to."""

SecurityRisk = Literal["unknown", "low", "medium", "high"]
"""Risk of an action as judged by the security analyzer."""

EffectClass = Literal["read_only", "idempotent", "keyed", "irreversible"]
"""How safe it is to repeat a tool's side effect."""

ExecutionStatus = Literal[
    "idle",
    "running",
    "paused",
    "waiting_for_confirmation",
    "waiting_for_human",
    "finished",
    "error",
    "stuck",
]
"""The conversation's execution status."""

TitleOrigin = Literal["first_message", "llm"]
"""Where a title came from."""

LedgerOrigin = Literal["runner", "reconciler", "lookup", "receipt", "human"]
"""Which component recorded a ledger transition."""

Resolution = Literal["confirmed", "failed", "retry"]
"""A decision on an operation whose outcome was unknown."""

ReceiptStatus = Literal["succeeded", "failed"]
"""The provider's verdict on an operation."""

InboxCommand = Literal["message", "pause", "resume", "resolve", "branch", "fork", "cancel"]
"""What an inbox record asks the conversation runner to do."""


class AvroModel(BaseModel):
    """Base of every record model: frozen, no extra fields, same fields as its `.avsc`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    if TYPE_CHECKING:
        # Every record is keyed by its conversation (DESIGN §4) and belongs to a tenant, and its
        # type is named by `kind`: every model declares these fields itself, where its schema
        # puts them (tests/schemas/test_schema_agreement.py checks it).
        conversation_id: str
        tenant_id: str
        kind: str
