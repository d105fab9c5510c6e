"""One OpenHands event ⇄ one convdb event: the fields that map 1:1, and the JSON rebuilt from them.

`fields_of` reads an event's kind-specific fields into a convdb type; `rebuild` makes the
OpenHands JSON that a convdb event stands for from convdb's fields alone (the generic MCP
action/observation kinds when the real ones are not known, so that the SDK loads it). What
`rebuild` cannot produce travels in the event's `extension` as a patch (`_patch`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, get_args

from convdb.projections.errors import ForeignRecordError
from convdb.projections.openhands._fields import (
    canonical_json,
    event_id,
    format_timestamp,
    optional,
    require,
    text_items,
    texts,
)
from convdb.schemas._types import ExecutionStatus
from convdb.schemas.events import (
    ActionEvent,
    AgentErrorEvent,
    CondensationEvent,
    Event,
    EventEnvelope,
    ExternalEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    StateUpdateEvent,
    SystemPromptEvent,
    UserRejectEvent,
)
from convdb.schemas.validation import json_problem

ORIGIN = "openhands"
"""The `origin` of OpenHands records in convdb (`ExternalEvent.origin`, `extension` key)."""

STATE_UPDATE = "ConversationStateUpdateEvent"

ANNOTATION_KINDS = frozenset(
    {STATE_UPDATE, "StreamingDeltaEvent", "LLMCompletionLogEvent", "ServerErrorEvent"}
)
"""Kinds that are not nodes of the OpenHands event tree (never the leaf): convdb annotations."""

CARRIED_KINDS = frozenset(
    {
        "ACPToolCallEvent",
        "CondensationRequest",
        "CondensationSummaryEvent",
        "ConversationErrorEvent",
        "HookExecutionEvent",
        "SecurityAnalysisEvent",
        "TokenEvent",
        *ANNOTATION_KINDS,
    }
)
"""Kinds with no convdb type: carried whole as `ExternalEvent`s."""

_STATUSES = frozenset(get_args(ExecutionStatus))
_RISKS = {"UNKNOWN": "unknown", "LOW": "low", "MEDIUM": "medium", "HIGH": "high"}

Fields = tuple[type[EventEnvelope], dict[str, Any]]
"""A convdb event type and its kind-specific field values (the envelope is placed later)."""


def _system_prompt(oh: dict[str, Any], where: str) -> Fields:
    prompt = require(oh, "system_prompt", dict, where)
    tools = require(oh, "tools", list, where)
    names = tuple(
        str(t.get("title") or t.get("name") or t.get("kind", "")) for t in tools if isinstance(t, dict)
    )
    return SystemPromptEvent, {
        "content": require(prompt, "text", str, f"{where}: system_prompt"),
        "tools": names,
    }


def _message(oh: dict[str, Any], where: str) -> Fields:
    message = require(oh, "llm_message", dict, where)
    role = require(message, "role", str, f"{where}: llm_message")
    return MessageEvent, {
        # OpenHands also has role "tool"; convdb's view shows it as user input (the patch keeps it).
        "role": role if role in ("user", "assistant", "system") else "user",
        "content": texts(message.get("content", []), where, "llm_message.content"),
        "llm_response_id": optional(oh, "llm_response_id", str, where),
    }


def _action(oh: dict[str, Any], where: str) -> Fields:
    call = require(oh, "tool_call", dict, where)
    raw = require(call, "arguments", str, f"{where}: tool_call")
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        parsed = raw
    if parsed is not raw and json_problem(parsed) is not None:
        # Not JSON convdb can walk (too deep, NaN, a 100-digit integer): kept as a JSON string, as
        # text that is not JSON is; the patch has the original text.
        parsed = raw
    arguments = canonical_json(parsed)
    risk = oh.get("security_risk", "UNKNOWN")
    return ActionEvent, {
        "tool_name": require(oh, "tool_name", str, where),
        "tool_call_id": require(oh, "tool_call_id", str, where),
        "arguments": arguments,
        "thought": texts(oh.get("thought", []), where, "thought"),
        "llm_response_id": require(oh, "llm_response_id", str, where),
        "security_risk": _RISKS.get(risk, "unknown") if isinstance(risk, str) else "unknown",
    }


def _observation(oh: dict[str, Any], where: str) -> Fields:
    observation = require(oh, "observation", dict, where)
    is_error = observation.get("is_error", False)
    return ObservationEvent, {
        "action_id": event_id(oh.get("action_id"), where, "action_id"),
        "tool_name": require(oh, "tool_name", str, where),
        "tool_call_id": require(oh, "tool_call_id", str, where),
        "content": texts(observation.get("content", []), where, "observation.content"),
        "is_error": is_error if isinstance(is_error, bool) else False,
    }


def _reject(oh: dict[str, Any], where: str) -> Fields:
    require(oh, "tool_name", str, where)
    require(oh, "tool_call_id", str, where)
    reason = optional(oh, "rejection_reason", str, where)
    return UserRejectEvent, {
        "action_id": event_id(oh.get("action_id"), where, "action_id"),
        "reason": "User rejected the action" if reason is None else reason,
    }


def _agent_error(oh: dict[str, Any], where: str) -> Fields:
    return AgentErrorEvent, {
        "error": require(oh, "error", str, where),
        "tool_name": require(oh, "tool_name", str, where),
        "tool_call_id": require(oh, "tool_call_id", str, where),
    }


def _condensation(oh: dict[str, Any], where: str) -> Fields:
    forgotten = require(oh, "forgotten_event_ids", list, where)
    ids = tuple(event_id(i, where, "forgotten_event_ids[]") for i in forgotten)
    require(oh, "llm_response_id", str, where)
    summary = optional(oh, "summary", str, where)
    # OpenHands shows a summary only with a summary_offset; convdb's view does the same.
    shown = summary if optional(oh, "summary_offset", int, where) is not None else None
    return CondensationEvent, {"forgotten_event_ids": ids, "summary": shown}


def _pause(_oh: dict[str, Any], _where: str) -> Fields:
    return PauseEvent, {"reason": ""}


def _interrupt(_oh: dict[str, Any], _where: str) -> Fields:
    return PauseEvent, {"reason": "interrupted"}


def _state_update(oh: dict[str, Any], where: str) -> Fields:
    key = oh.get("key")
    if key is not None and not isinstance(key, str):
        raise ForeignRecordError(f"{where}: `key` must be a string")
    value = oh.get("value")
    if key == "execution_status" and isinstance(value, str) and value in _STATUSES:
        return StateUpdateEvent, {"execution_status": value, "reason": ""}
    return _carried(oh, where)


def _carried(oh: dict[str, Any], _where: str) -> Fields:
    return ExternalEvent, {"origin": ORIGIN, "external_kind": oh["kind"]}


_READERS: dict[str, Callable[[dict[str, Any], str], Fields]] = {
    "SystemPromptEvent": _system_prompt,
    "MessageEvent": _message,
    "ActionEvent": _action,
    "ObservationEvent": _observation,
    "UserRejectObservation": _reject,
    "AgentErrorEvent": _agent_error,
    "Condensation": _condensation,
    "PauseEvent": _pause,
    "InterruptEvent": _interrupt,
    STATE_UPDATE: _state_update,
    **{kind: _carried for kind in CARRIED_KINDS - {STATE_UPDATE}},
}

KNOWN_KINDS = frozenset(_READERS)
"""Every event kind of openhands-sdk / openhands-agent-server 1.58.2; others are refused."""


def fields_of(oh: dict[str, Any], where: str) -> Fields:
    """The convdb type and kind-specific fields of one OpenHands event (`kind` already checked)."""
    return _READERS[oh["kind"]](oh, where)


def rebuild(event: Event) -> dict[str, Any]:
    """The OpenHands JSON `event` stands for, from convdb's fields alone (no extension)."""
    out: dict[str, Any] = {
        "id": event.id,
        "timestamp": format_timestamp(event.timestamp),
        "source": event.source,
    }
    if event.parent_id is not None:
        out["parent_id"] = event.parent_id
    out.update(_WRITERS[event.kind](event))
    return out


def _arguments_object(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        value = arguments
    return value if isinstance(value, dict) else {"value": value}


_WRITERS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "system_prompt": lambda e: {
        "system_prompt": text_items(e.content or " ")[0],
        "tools": [],
        "kind": "SystemPromptEvent",
    },
    "message": lambda e: {
        "llm_message": {"role": e.role, "content": text_items(e.content), "thinking_blocks": []},
        **({"llm_response_id": e.llm_response_id} if e.llm_response_id is not None else {}),
        "activated_skills": [],
        "extended_content": [],
        "kind": "MessageEvent",
    },
    "action": lambda e: {
        "thought": text_items(e.thought),
        "thinking_blocks": [],
        "action": {"data": _arguments_object(e.arguments), "kind": "MCPToolAction"},
        "tool_name": e.tool_name,
        "tool_call_id": e.tool_call_id,
        "tool_call": {
            "id": e.tool_call_id,
            "name": e.tool_name,
            "arguments": e.arguments,
            "origin": "completion",
        },
        "llm_response_id": e.llm_response_id,
        "security_risk": e.security_risk.upper(),
        "kind": "ActionEvent",
    },
    "observation": lambda e: {
        "tool_name": e.tool_name,
        "tool_call_id": e.tool_call_id,
        "observation": {
            "content": text_items(e.content),
            "is_error": e.is_error,
            "tool_name": e.tool_name,
            "kind": "MCPToolObservation",
        },
        "action_id": e.action_id,
        "extended_content": [],
        "kind": "ObservationEvent",
    },
    "user_reject": lambda e: {
        "tool_name": "",
        "tool_call_id": "",
        "rejection_reason": e.reason,
        "action_id": e.action_id,
        "kind": "UserRejectObservation",
    },
    "agent_error": lambda e: {
        "tool_name": e.tool_name or "",
        "tool_call_id": e.tool_call_id or "",
        "error": e.error,
        "kind": "AgentErrorEvent",
    },
    "condensation": lambda e: {
        "forgotten_event_ids": list(e.forgotten_event_ids),
        **({"summary": e.summary, "summary_offset": 0} if e.summary is not None else {}),
        "llm_response_id": "",
        "kind": "Condensation",
    },
    "pause": lambda e: {"kind": "InterruptEvent" if e.reason == "interrupted" else "PauseEvent"},
    "state_update": lambda e: {"key": "execution_status", "value": e.execution_status, "kind": STATE_UPDATE},
    "external": lambda e: {"kind": e.external_kind},
}

EXPORTED_KINDS = frozenset(_WRITERS)
"""convdb kinds that have an OpenHands event."""

NOT_EXPORTED = frozenset({"llm_usage", "title", "fork", "active_leaf_changed"})
"""convdb kinds without an OpenHands event: LLM usage goes into base_state.json's stats; titles,
forks and leaf moves are left out (each kind is in `_WRITERS` or here)."""
