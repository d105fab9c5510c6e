"""Records of the other topics: effect ledger, provider receipts, inbox, base-state snapshots."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import AwareDatetime, Field

from convdb.schemas._types import (
    AvroModel,
    EffectClass,
    ExecutionStatus,
    InboxCommand,
    LedgerOrigin,
    ReceiptStatus,
    Resolution,
)
from convdb.schemas.graph import GRAPH_TYPES


class LedgerRecord(AvroModel):
    """Fields every effect-ledger transition carries."""

    id: str = Field(description="Unique ledger record id (UUID text).")
    operation_id: str = Field(description="The operation: '{conversation_id}/{action_id}'.")
    conversation_id: str = Field(description="Conversation the operation belongs to; the Kafka key.")
    tenant_id: str = Field(description="Tenant that owns the conversation.")
    timestamp: AwareDatetime = Field(description="When the transition was recorded (UTC).")


class EffectProposed(LedgerRecord):
    """An operation is about to be attempted (durable before the call)."""

    action_id: str = Field(description="Id of the ActionEvent.")
    tool_name: str = Field(description="Tool to call.")
    intent_hash: str = Field(description="sha256 of tool_name + canonical arguments.")
    target: str | None = Field(None, description="What the effect touches.")
    effect_class: EffectClass = Field(description="Effect class of the tool.")
    reconcile_after: AwareDatetime = Field(
        description="Deadline after which the reconciler looks the operation up."
    )
    kind: Literal["effect_proposed"] = Field("effect_proposed", description="Always 'effect_proposed'.")


class EffectStarted(LedgerRecord):
    """The provider call is about to be made."""

    attempt: int = Field(1, description="Attempt number, from 1.")
    kind: Literal["effect_started"] = Field("effect_started", description="Always 'effect_started'.")


class EffectConfirmed(LedgerRecord):
    """The provider did the operation."""

    provider_receipt: str | None = Field(None, description="Provider's request/result id.")
    result: str = Field("", description="Result text.")
    origin: LedgerOrigin = Field("runner", description="Who recorded it.")
    kind: Literal["effect_confirmed"] = Field("effect_confirmed", description="Always 'effect_confirmed'.")


class EffectFailed(LedgerRecord):
    """The provider did not do the operation."""

    error: str = Field(description="Error text.")
    retryable: bool = Field(False, description="True when a retry with the same key is safe and useful.")
    origin: LedgerOrigin = Field("runner", description="Who recorded it.")
    kind: Literal["effect_failed"] = Field("effect_failed", description="Always 'effect_failed'.")


class EffectUnknown(LedgerRecord):
    """Nobody can tell whether the operation happened; a human decides."""

    reason: str = Field(description="Why the outcome is unknown.")
    evidence: str = Field("", description="What is known (ledger, lookup answers).")
    origin: LedgerOrigin = Field("runner", description="Who recorded it.")
    kind: Literal["effect_unknown"] = Field("effect_unknown", description="Always 'effect_unknown'.")


class EffectResolved(LedgerRecord):
    """A decision on an unknown operation: confirmed, failed, or retry approved."""

    decision: Resolution = Field(description="The decision.")
    resolved_by: str = Field(description="Who decided (a user id, or 'reconciler').")
    note: str = Field("", description="Free text.")
    kind: Literal["effect_resolved"] = Field("effect_resolved", description="Always 'effect_resolved'.")


class Receipt(AvroModel):
    """A provider's receipt for an operation (webhook or callback)."""

    id: str = Field(description="Unique receipt id.")
    provider: str = Field(description="Provider name.")
    operation_id: str = Field(description="Operation the receipt is for.")
    conversation_id: str = Field(description="Conversation of the operation; the Kafka key.")
    tenant_id: str = Field(description="Tenant of the conversation.")
    provider_receipt: str = Field(description="Provider's request/result id.")
    status: ReceiptStatus = Field(description="Provider's verdict.")
    result: str = Field("", description="Result text.")
    timestamp: AwareDatetime = Field(description="When the provider did the operation (UTC).")
    kind: Literal["receipt"] = Field("receipt", description="Always 'receipt'.")


class InboxMessage(AvroModel):
    """A message or command sent to a conversation; durable before the runner sees it."""

    id: str = Field(description="Unique inbox record id.")
    conversation_id: str = Field(description="Target conversation; the Kafka key.")
    tenant_id: str = Field(description="Tenant of the conversation.")
    timestamp: AwareDatetime = Field(description="When it was accepted (UTC).")
    command: InboxCommand = Field(description="What to do.")
    content: str = Field("", description="Message text.")
    sender: str = Field("user", description="Who sent it.")
    operation_id: str | None = Field(None, description="Operation a 'resolve' command refers to.")
    kind: Literal["inbox_message"] = Field("inbox_message", description="Always 'inbox_message'.")
    agent: str | None = Field(
        None,
        description="Agent to run the conversation (its first message chooses; later ones must name the "
        "same or none); null: the runner's default agent.",
    )
    at_seq: int | None = Field(
        None,
        description="Event (by seq) a 'branch' makes the active leaf, or of the source conversation a "
        "'fork' starts after.",
    )
    source_conversation_id: str | None = Field(
        None,
        description="Conversation a 'fork' copies the path of (up to at_seq); the record is keyed by the "
        "new conversation, whose runner writes its ForkEvent.",
    )
    parent_conversation_id: str | None = Field(
        None,
        description="On a delegated child's first record: the conversation that delegated to it (the "
        "parent); null otherwise.",
    )
    parent_operation_id: str | None = Field(
        None,
        description="On a delegated child's first record: the operation in the parent's ledger that "
        "started the child (it fixes the child's conversation id); null otherwise.",
    )
    delegation_depth: int | None = Field(
        None, description="On a delegated child's first record: its depth in the task tree (1 under a root)."
    )
    budget_usd: float | None = Field(
        None,
        description="On a delegated child's first record: the budget (USD) taken from its parent's; null: "
        "the runner's limit.",
    )
    child_conversation_id: str | None = Field(
        None,
        description="On a child's report to its parent: the child that ended (content holds its summary, "
        "operation_id the child's operation in the parent's ledger).",
    )
    child_status: str | None = Field(
        None,
        description="On a child's report to its parent: how it ended (finished, error, budget, stuck, "
        "waiting_for_human, waiting_for_confirmation, rejected).",
    )
    child_cost_usd: float | None = Field(
        None,
        description="On a child's report to its parent: what the child and the conversations below it "
        "spent on LLM calls (USD), charged to the parent's budget; null: not known.",
    )


class ExternalBatch(AvroModel):
    """A foreign system's records for a conversation, stored before the API answers; a runner appends them."""

    id: str = Field(description="Unique inbox record id.")
    conversation_id: str = Field(description="Target conversation; the Kafka key.")
    tenant_id: str = Field(description="Tenant of the conversation.")
    timestamp: AwareDatetime = Field(description="When it was accepted (UTC).")
    origin: str = Field(description="System the records come from, e.g. 'openhands'.")
    payload_kind: str = Field(
        description="What `payload` holds, e.g. 'events' (a JSON array of events), 'conversation_info', "
        "'base_state', 'meta'."
    )
    payload: str = Field(description="The records as that system sent or stored them (JSON text).")
    kind: Literal["external_batch"] = Field("external_batch", description="Always 'external_batch'.")


class Snapshot(AvroModel):
    """Base-state snapshot of a conversation with the events offset it covers."""

    conversation_id: str = Field(description="Conversation; the Kafka key.")
    tenant_id: str = Field(description="Tenant of the conversation.")
    timestamp: AwareDatetime = Field(description="When the snapshot was taken (UTC).")
    last_seq: int = Field(description="seq of the last event covered.")
    last_event_id: str | None = Field(None, description="Id of the last event covered.")
    active_leaf_id: str | None = Field(None, description="Active leaf at the snapshot.")
    events_partition: int = Field(-1, description="Partition of the events topic holding the conversation.")
    events_offset: int = Field(-1, description="Events-topic offset to resume reading from (-1 unknown).")
    execution_status: ExecutionStatus = Field(description="Execution status at the snapshot.")
    agent_json: str = Field("{}", description="Agent configuration as JSON.")
    stats_json: str = Field("{}", description="Run statistics as JSON.")
    secret_names: tuple[str, ...] = Field((), description="Names (never values) of registered secrets.")
    inbox_offset: int = Field(-1, description="Next inbox offset to read (-1 unknown).")
    open_operations: tuple[str, ...] = Field((), description="Operation ids not yet confirmed or failed.")
    kind: Literal["snapshot"] = Field("snapshot", description="Always 'snapshot'.")
    view_complete: bool = Field(
        False,
        description="True when view_events (and path_ids) rebuild the view; false means restore "
        "refolds from first_events_offset.",
    )
    view_events: tuple[bytes, ...] = Field(
        (),
        description="The active branch as the agent reads it (condensations applied), each event "
        "codec-encoded, root first.",
    )
    path_ids: tuple[str, ...] = Field(
        (),
        description="Ids of the active path from the last condensation on it to the active leaf, root first.",
    )
    path_events: tuple[bytes, ...] = Field(
        (), description="Events of path_ids that are not in view_events, codec-encoded."
    )
    first_events_offset: int = Field(
        -1, description="Events-topic offset of the conversation's first event (-1 unknown)."
    )
    effects_offset: int = Field(
        -1,
        description="Effects-topic offset from which a restore folds this conversation's ledger (-1 "
        "unknown).",
    )
    partition_events_offset: int = Field(
        -1,
        description="Events-topic offset from which a restore of the whole partition must read (-1 unknown).",
    )
    partition_effects_offset: int = Field(
        -1,
        description="Effects-topic offset from which a restore of the whole partition must read (-1 "
        "unknown).",
    )
    total_cost: float = Field(0.0, description="LLM cost (USD) of every event covered.")


LedgerEvent = Annotated[
    EffectProposed | EffectStarted | EffectConfirmed | EffectFailed | EffectUnknown | EffectResolved,
    Field(discriminator="kind"),
]
"""Any effect-ledger transition, discriminated by `kind`."""

LEDGER_TYPES: tuple[type[LedgerRecord], ...] = get_args(get_args(LedgerEvent)[0])
"""Every effect-ledger record type."""

RECORD_TYPES: tuple[type[AvroModel], ...] = (
    *LEDGER_TYPES,
    *GRAPH_TYPES,
    Receipt,
    InboxMessage,
    ExternalBatch,
    Snapshot,
)
"""Every non-event record type."""
