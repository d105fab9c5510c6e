"""The active branch as OpenAI/litellm chat messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from convdb.schemas import (
    ActionEvent,
    AgentErrorEvent,
    CondensationEvent,
    Event,
    LLMUsageEvent,
    MessageEvent,
    ObservationEvent,
    SystemPromptEvent,
    UserRejectEvent,
)


def _call(tool_call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": tool_call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def to_messages(view: Sequence[Event]) -> list[dict[str, Any]]:
    """Chat messages for the LLM. Tool calls of one LLM response become one assistant turn.

    A rejected tool call (bad arguments) stays in that turn with its error as the tool answer,
    so every tool result follows the call it answers, as chat APIs require.
    """
    out: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None
    open_calls: dict[str, str] = {}  # action id -> tool call id, for the current turn
    answered = False
    for event in view:
        if isinstance(event, LLMUsageEvent):
            turn = None  # every LLM call starts a new assistant turn
            continue
        if isinstance(event, ActionEvent) or (isinstance(event, AgentErrorEvent) and event.tool_call_id):
            if turn is None or answered:
                thought = event.thought if isinstance(event, ActionEvent) else ""
                turn = {"role": "assistant", "content": thought or None, "tool_calls": []}
                out.append(turn)
                open_calls, answered = {}, False
            _add_call(out, turn, open_calls, event)
            continue
        message = _message(event, open_calls)
        if message is None:
            continue
        if message["role"] == "tool":
            answered = True
        else:
            turn, open_calls = None, {}
        out.append(message)
    return out


def _add_call(
    out: list[dict[str, Any]], turn: dict[str, Any], open_calls: dict[str, str], event: Event
) -> None:
    if isinstance(event, ActionEvent):
        open_calls[event.id] = event.tool_call_id
        turn["tool_calls"].append(_call(event.tool_call_id, event.tool_name, event.arguments))
    elif isinstance(event, AgentErrorEvent):
        turn["tool_calls"].append(_call(event.tool_call_id or "", event.tool_name or "invalid", "{}"))
        out.append({"role": "tool", "tool_call_id": event.tool_call_id, "content": event.error})


def _message(event: Event, open_calls: dict[str, str]) -> dict[str, Any] | None:
    match event:
        case SystemPromptEvent():
            return {"role": "system", "content": event.content}
        case MessageEvent():
            return {"role": event.role, "content": event.content}
        case ObservationEvent() if event.action_id in open_calls:
            return {"role": "tool", "tool_call_id": event.tool_call_id, "content": event.content}
        case ObservationEvent():
            return {"role": "user", "content": f"[{event.tool_name} result] {event.content}"}
        case UserRejectEvent() if event.action_id in open_calls:
            text = f"Rejected by the user. {event.reason}".strip()
            return {"role": "tool", "tool_call_id": open_calls[event.action_id], "content": text}
        case UserRejectEvent():
            return {"role": "user", "content": f"I rejected that action. {event.reason}".strip()}
        case AgentErrorEvent():
            return {"role": "user", "content": f"Error: {event.error}"}
        case CondensationEvent(summary=str() as summary):
            return {"role": "user", "content": f"Summary of earlier events: {summary}"}
    return None
