"""Conversation events: the closed set of records on the events topic."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import AwareDatetime, Field

from convdb.schemas._types import (
    AvroModel,
    EffectClass,
    EventSource,
    ExecutionStatus,
    MessageRole,
    SecurityRisk,
    TitleOrigin,
)

EXTENSION_DOC = (
    "JSON object keyed by origin (e.g. 'openhands'): what a foreign system recorded for this event "
    "that no convdb field carries, given back unchanged on export; null for convdb's own events."
)


def _extension() -> Any:
    """The `extension` field every event type declares last (schema versions only ever append)."""
    return Field(None, description=EXTENSION_DOC)


class EventEnvelope(AvroModel):
    """Fields every conversation event carries (DESIGN §5)."""

    id: str = Field(description="Unique event id (UUID text).")
    conversation_id: str = Field(description="Conversation the event belongs to; the Kafka key.")
    tenant_id: str = Field(description="Tenant that owns the conversation.")
    seq: int = Field(
        description="Per-conversation sequence number, gap-free from 1, assigned by the writer; "
        "0 for annotations outside the chain (TitleEvent)."
    )
    timestamp: AwareDatetime = Field(description="When the event was created (UTC).")
    source: EventSource = Field(description="Who produced the event.")
    parent_id: str | None = Field(
        None,
        description="Id of the parent event in the conversation tree; null for a root.",
    )


class SystemPromptEvent(EventEnvelope):
    """The system prompt and tool list the agent starts from."""

    content: str = Field(description="System prompt text.")
    tools: tuple[str, ...] = Field((), description="Names of the tools offered to the LLM.")
    kind: Literal["system_prompt"] = Field("system_prompt", description="Always 'system_prompt'.")
    extension: str | None = _extension()
    agent: str | None = Field(
        None,
        description="Name of the agent that runs the conversation (an entry point of 'convdb.agents', "
        "'module:attr', or 'default'); null for conversations written before agents were named (the "
        "runner's default agent).",
    )
    agent_version: str | None = Field(
        None,
        description="Digest of the agent's configuration (model, prompt, tools, policies) when the "
        "conversation started.",
    )
    parent_conversation_id: str | None = Field(
        None, description="The conversation that delegated this one (a task-tree child); null for a root."
    )
    parent_operation_id: str | None = Field(
        None, description="The parent's operation that started this child; null for a root."
    )
    delegation_depth: int = Field(0, description="Depth in the task tree: 0 for a root, 1 for its children.")
    budget_usd: float | None = Field(
        None, description="The budget (USD) the parent gave this child; null: the runner's limit."
    )


class MessageEvent(EventEnvelope):
    """A chat message from the user or the agent."""

    role: MessageRole = Field(description="LLM role the message is projected to.")
    content: str = Field(description="Message text.")
    llm_response_id: str | None = Field(None, description="LLM response that produced the message, if any.")
    kind: Literal["message"] = Field("message", description="Always 'message'.")
    extension: str | None = _extension()


class ActionEvent(EventEnvelope):
    """A tool call the agent decided to make."""

    tool_name: str = Field(description="Tool to call.")
    tool_call_id: str = Field(description="The LLM's id for this tool call.")
    arguments: str = Field(description="Tool arguments as canonical JSON (sorted keys, no spaces).")
    thought: str = Field("", description="The agent's reasoning text that came with the call.")
    llm_response_id: str = Field(
        description="LLM response that proposed the action; shared by parallel actions."
    )
    security_risk: SecurityRisk = Field("unknown", description="Risk assigned by the security analyzer.")
    operation_id: str = Field(description="Operation id: '{conversation_id}/{action_id}'.")
    intent_hash: str = Field(description="sha256 of tool_name + canonical arguments.")
    target: str | None = Field(None, description="What the effect touches, e.g. 'tracker:issues'.")
    effect_class: EffectClass = Field(description="Effect class of the tool.")
    kind: Literal["action"] = Field("action", description="Always 'action'.")
    extension: str | None = _extension()


class ObservationEvent(EventEnvelope):
    """The result of an action."""

    action_id: str = Field(description="Id of the ActionEvent observed.")
    tool_name: str = Field(description="Tool that was called.")
    tool_call_id: str = Field(description="The LLM's id for the tool call.")
    content: str = Field(description="Result text shown to the LLM.")
    is_error: bool = Field(False, description="True when the tool reported an error.")
    provider_receipt: str | None = Field(
        None, description="Provider's request/result id, when the tool has one."
    )
    backfilled: bool = Field(
        False,
        description="True when recovered from a receipt or lookup rather than observed live.",
    )
    kind: Literal["observation"] = Field("observation", description="Always 'observation'.")
    extension: str | None = _extension()


class AgentErrorEvent(EventEnvelope):
    """An error the agent should see (bad tool arguments, tool crash)."""

    error: str = Field(description="Error text.")
    tool_name: str | None = Field(None, description="Tool involved, if any.")
    tool_call_id: str | None = Field(None, description="Tool call involved, if any.")
    synthetic: bool = Field(
        False,
        description="True when made by the runtime (e.g. on recovery), not by a tool.",
    )
    kind: Literal["agent_error"] = Field("agent_error", description="Always 'agent_error'.")
    extension: str | None = _extension()


class UserRejectEvent(EventEnvelope):
    """The user rejected a pending action."""

    action_id: str = Field(description="Id of the rejected ActionEvent.")
    reason: str = Field("", description="Why it was rejected.")
    kind: Literal["user_reject"] = Field("user_reject", description="Always 'user_reject'.")
    extension: str | None = _extension()


class CondensationEvent(EventEnvelope):
    """Forget events from the view and optionally insert a summary."""

    forgotten_event_ids: tuple[str, ...] = Field(description="Ids of events removed from the view.")
    summary: str | None = Field(None, description="Summary inserted in place of the forgotten events.")
    kind: Literal["condensation"] = Field("condensation", description="Always 'condensation'.")
    extension: str | None = _extension()


class PauseEvent(EventEnvelope):
    """The user paused the conversation."""

    reason: str = Field("", description="Why it was paused.")
    kind: Literal["pause"] = Field("pause", description="Always 'pause'.")
    extension: str | None = _extension()


class StateUpdateEvent(EventEnvelope):
    """The execution status changed."""

    execution_status: ExecutionStatus = Field(description="New execution status.")
    reason: str = Field("", description="Why the status changed.")
    kind: Literal["state_update"] = Field("state_update", description="Always 'state_update'.")
    extension: str | None = _extension()


class LLMUsageEvent(EventEnvelope):
    """Usage and cost of one LLM call."""

    model: str = Field(description="litellm model name.")
    llm_response_id: str = Field(description="Id of the LLM response.")
    prompt_tokens: int = Field(description="Prompt tokens.")
    completion_tokens: int = Field(description="Completion tokens.")
    cost: float | None = Field(None, description="Cost in USD when the model is priced.")
    latency_ms: float = Field(description="Wall time of the call in milliseconds.")
    kind: Literal["llm_usage"] = Field("llm_usage", description="Always 'llm_usage'.")
    cached_tokens: int = Field(0, description="Prompt tokens served from the provider's cache.")
    extension: str | None = _extension()


class ForkEvent(EventEnvelope):
    """This conversation was forked from another one."""

    source_conversation_id: str = Field(description="Conversation forked from.")
    source_event_id: str = Field(description="Event of the source conversation the fork starts after.")
    workspace_shared: bool = Field(
        True,
        description="True unless a workspace snapshot was given: both conversations then act on one "
        "workspace.",
    )
    snapshot_ref: str | None = Field(
        None,
        description="Reference to the workspace snapshot the fork starts from, if any.",
    )
    kind: Literal["fork"] = Field("fork", description="Always 'fork'.")
    extension: str | None = _extension()


class ActiveLeafChangedEvent(EventEnvelope):
    """The active branch now ends at another event."""

    leaf_event_id: str = Field(description="Id of the new active leaf.")
    kind: Literal["active_leaf_changed"] = Field(
        "active_leaf_changed", description="Always 'active_leaf_changed'."
    )
    extension: str | None = _extension()


class TitleEvent(EventEnvelope):
    """A title generated for the conversation (recorded so replays never call the LLM)."""

    title: str = Field(description="The title.")
    origin: TitleOrigin = Field(description="How the title was made.")
    model: str | None = Field(None, description="LLM model used, for LLM titles.")
    kind: Literal["title"] = Field("title", description="Always 'title'.")
    extension: str | None = _extension()


class ExternalEvent(EventEnvelope):
    """A foreign system's event that no convdb type stands for; its content is in `extension`."""

    origin: str = Field(description="System that recorded the event, e.g. 'openhands'.")
    external_kind: str = Field(description="Its type in that system, e.g. 'HookExecutionEvent'.")
    kind: Literal["external"] = Field("external", description="Always 'external'.")
    extension: str | None = _extension()


Event = Annotated[
    SystemPromptEvent
    | MessageEvent
    | ActionEvent
    | ObservationEvent
    | AgentErrorEvent
    | UserRejectEvent
    | CondensationEvent
    | PauseEvent
    | StateUpdateEvent
    | LLMUsageEvent
    | ForkEvent
    | ActiveLeafChangedEvent
    | TitleEvent
    | ExternalEvent,
    Field(discriminator="kind"),
]
"""Any conversation event, discriminated by `kind`."""

EVENT_TYPES: tuple[type[Event], ...] = get_args(get_args(Event)[0])
"""Every conversation event type, in the order of the `Event` union (the one list of them)."""

EVENT_KINDS: tuple[str, ...] = tuple(t.model_fields["kind"].default for t in EVENT_TYPES)
"""The `kind` of every event type, in `EVENT_TYPES` order."""

if TYPE_CHECKING:
    EventKind = str
else:
    # A Literal built from the union: pydantic validates it; a type checker cannot build one from data.
    EventKind = Literal[EVENT_KINDS]
"""One of `EVENT_KINDS` (validated as a Literal of them)."""
