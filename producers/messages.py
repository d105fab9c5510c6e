"""The active branch as OpenAI/litellm chat messages."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from convdb.schemas import Event


def _call(tool_call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": tool_call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def to_messages(view: Sequence[Event]) -> list[dict[str, Any]]:
    """Chat messages for the LLM. Tool calls of one LLM response become one assistant turn.

    A rejected tool call (bad arguments) stays in that turn with its error as the tool answer,
    so every tool result follows the call it answers, as chat APIs require. Each kind is either
    in `TURN_KINDS`, in `_MESSAGES` or in `UNSEEN_KINDS` (a test holds every kind to that).
    """
    out: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None
    open_calls: dict[str, str] = {}  # action id -> tool call id, for the current turn
    answered = False
    for event in view:
        kind = event.kind
        if kind == "llm_usage":
            turn = None  # every LLM call starts a new assistant turn
            continue
        if kind == "action" or (kind == "agent_error" and event.tool_call_id):  # type: ignore[union-attr]
            if turn is None or answered:
                thought = event.thought if kind == "action" else ""  # type: ignore[union-attr]
                turn = {"role": "assistant", "content": thought or None, "tool_calls": []}
                out.append(turn)
                open_calls, answered = {}, False
            _add_call(out, turn, open_calls, event)
            continue
        written = _MESSAGES.get(kind)
        message = None if written is None else written(event, open_calls)
        if message is None:
            continue
        if message["role"] == "tool":
            answered = True
        else:
            turn, open_calls = None, {}
        out.append(message)
    return out


def _add_call(
    out: list[dict[str, Any]], turn: dict[str, Any], open_calls: dict[str, str], event: Any
) -> None:
    if event.kind == "action":
        open_calls[event.id] = event.tool_call_id
        turn["tool_calls"].append(_call(event.tool_call_id, event.tool_name, event.arguments))
    else:  # an agent error that answers a tool call of this turn
        turn["tool_calls"].append(_call(event.tool_call_id or "", event.tool_name or "invalid", "{}"))
        out.append({"role": "tool", "tool_call_id": event.tool_call_id, "content": event.error})


def _observation(event: Any, open_calls: dict[str, str]) -> dict[str, Any]:
    if event.action_id in open_calls:
        return {"role": "tool", "tool_call_id": event.tool_call_id, "content": event.content}
    return {"role": "user", "content": f"[{event.tool_name} result] {event.content}"}


def _user_reject(event: Any, open_calls: dict[str, str]) -> dict[str, Any]:
    if event.action_id in open_calls:
        text = f"Rejected by the user. {event.reason}".strip()
        return {"role": "tool", "tool_call_id": open_calls[event.action_id], "content": text}
    return {"role": "user", "content": f"I rejected that action. {event.reason}".strip()}


def _condensation(event: Any, _open_calls: dict[str, str]) -> dict[str, Any] | None:
    if event.summary is None:
        return None  # a condensation without a summary only hides what it forgot
    return {"role": "user", "content": f"Summary of earlier events: {event.summary}"}


# A dict on `kind`, not `match` on classes: isinstance on pydantic models is slow.
_MESSAGES: dict[str, Callable[[Any, dict[str, str]], dict[str, Any] | None]] = {
    "system_prompt": lambda e, _calls: {"role": "system", "content": e.content},
    "message": lambda e, _calls: {"role": e.role, "content": e.content},
    "observation": _observation,
    "user_reject": _user_reject,
    "agent_error": lambda e, _calls: {"role": "user", "content": f"Error: {e.error}"},
    "condensation": _condensation,
}
"""The chat message of an event the LLM reads, given the current turn's open tool calls
(action id -> tool call id); None shows nothing."""

TURN_KINDS = frozenset({"llm_usage", "action"})
"""Kinds that make the assistant turns: an LLM call starts one, an action is a tool call in it (as
is an agent error that names a tool call; one that does not is a message)."""

UNSEEN_KINDS = frozenset({"pause", "state_update", "fork", "active_leaf_changed", "title", "external"})
"""Kinds the LLM is never shown: run control, the branch structure, titles and foreign records."""
