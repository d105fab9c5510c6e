"""A LangGraph thread's `messages` channel as convdb's message, action, observation and usage events.

Pure: it reads LangChain messages (duck-typed: `type`, `id`, `content`, `tool_calls`,
`usage_metadata`, `tool_call_id`, ...) and says which events they become; the hosted checkpointer
(`convdb.producers.graph_host`) writes them in the transaction of the checkpoint that holds the
messages, so the console, titles, stats, search and export read a LangGraph thread as any other
conversation. The mapping is lossy on purpose (the graph topic stays the source of truth):

- HumanMessage: MessageEvent(user); AIMessage without tool calls: MessageEvent(assistant);
- AIMessage with tool calls: one ActionEvent per call (`llm_response_id` = the message's id);
- an AIMessage's `usage_metadata`: an LLMUsageEvent;
- ToolMessage: the ObservationEvent of the action with its `tool_call_id` (none known: dropped);
- SystemMessage and other kinds: nothing.

Event ids are derived from message ids (add_messages gives every message one), so a message
already projected (or the user message the runner appended from the inbox, whose id it shares)
is never projected twice.

A fork (a root checkpoint whose parent is not the thread's latest one: `update_state` or a replay
on an older checkpoint, a `__copy__`) is a convdb branch: `place` puts the fork's new events after
the last event its messages already had in the log (an `ActiveLeafChangedEvent` moves the leaf
there first), so the active branch is the graph's current lineage and the old lineage stays in
the tree as the other branch.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from convdb.projections.openhands._fields import canonical_json, intent_hash
from convdb.schemas import ActionEvent, LLMUsageEvent, MessageEvent, ObservationEvent
from convdb.schemas.events import Event, EventEnvelope

_IDS = uuid.UUID("6f0c7a52-64a4-4c1e-9a53-2f1d1c3d6b7e")
"""uuid5 namespace of the event ids derived from message ids."""


@dataclass(frozen=True)
class Projected:
    """One event to write: its class and fields (the writer adds seq, parent, timestamp, source)."""

    cls: type[EventEnvelope]
    source: str
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """The event's id."""
        return str(self.fields["id"])


def derived_id(message_id: str, part: str) -> str:
    """A stable event id for one part (a tool call, the usage) of a message."""
    return str(uuid.uuid5(_IDS, f"{message_id}#{part}"))


def text_of(content: Any) -> str:
    """A message's text: a string as is, content blocks' text joined, anything else as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            b if isinstance(b, str) else str(b.get("text", "")) for b in content if isinstance(b, str | dict)
        ]
        return "".join(parts)
    return json.dumps(content, default=str)


def project_messages(
    conversation_id: str, messages: Iterable[Any], known: Collection[str], actions: dict[str, str]
) -> list[Projected]:
    """The events `messages` add to a conversation whose log already holds the event ids `known`.

    `actions` maps the tool call ids of the conversation's actions to their event ids (updated
    with the actions projected here, so a ToolMessage finds the call it answers).
    """
    out: list[Projected] = []
    for message in messages:
        message_id = getattr(message, "id", None)
        kind = getattr(message, "type", None)
        if not message_id:
            continue
        for event in _project_one(conversation_id, message, kind, str(message_id), actions):
            if event.id not in known:
                out.append(event)
    return out


def _project_one(
    cid: str, message: Any, kind: str | None, message_id: str, actions: dict[str, str]
) -> Sequence[Projected]:
    text = text_of(getattr(message, "content", ""))
    if kind == "human":
        return [Projected(MessageEvent, "user", {"id": message_id, "role": "user", "content": text})]
    if kind == "ai":
        return _ai(cid, message, message_id, text, actions)
    if kind == "tool":
        call_id = str(getattr(message, "tool_call_id", "") or "")
        action_id = actions.get(call_id)
        if action_id is None:
            return []
        fields = {
            "id": message_id,
            "action_id": action_id,
            "tool_name": str(getattr(message, "name", None) or ""),
            "tool_call_id": call_id,
            "content": text,
            "is_error": getattr(message, "status", "success") == "error",
        }
        return [Projected(ObservationEvent, "environment", fields)]
    return []


def _ai(cid: str, message: Any, message_id: str, text: str, actions: dict[str, str]) -> list[Projected]:
    out: list[Projected] = []
    fields: dict[str, Any]
    calls = list(getattr(message, "tool_calls", None) or [])
    for call in calls:
        call_id = str(call.get("id") or derived_id(message_id, f"call-{len(out)}"))
        action_id = derived_id(message_id, f"call:{call_id}")
        actions[call_id] = action_id
        arguments = canonical_json(call.get("args") or {})
        fields = {
            "id": action_id,
            "tool_name": str(call.get("name", "")),
            "tool_call_id": call_id,
            "arguments": arguments,
            "thought": text,
            "llm_response_id": message_id,
            "operation_id": f"{cid}/{action_id}",
            "intent_hash": intent_hash(str(call.get("name", "")), arguments),
            "effect_class": "irreversible",
        }
        out.append(Projected(ActionEvent, "agent", fields))
    if not calls:
        fields = {"id": message_id, "role": "assistant", "content": text, "llm_response_id": message_id}
        out.append(Projected(MessageEvent, "agent", fields))
    usage = getattr(message, "usage_metadata", None)
    if usage:
        metadata = getattr(message, "response_metadata", None) or {}
        fields = {
            "id": derived_id(message_id, "usage"),
            "model": str(metadata.get("model_name") or metadata.get("model") or "unknown"),
            "llm_response_id": message_id,
            "prompt_tokens": int(usage.get("input_tokens", 0)),
            "completion_tokens": int(usage.get("output_tokens", 0)),
            "latency_ms": 0.0,
        }
        out.append(Projected(LLMUsageEvent, "environment", fields))
    return out


PROJECTED_KINDS = frozenset({"message", "action", "observation", "llm_usage"})
"""Event kinds a message projects to: the events a graph thread branches or forks at."""


@dataclass(frozen=True)
class Placement:
    """Where a root checkpoint's messages go in the conversation's tree."""

    leaf: str | None
    """Move the active leaf here first (a fork that starts a branch); None: append at the leaf."""
    events: list[Projected]
    """The new events, in order, each placed after the one before."""
    ids: frozenset[str] = frozenset()
    """The ids of every event the checkpoint's messages project to (new or not)."""


def place(
    conversation_id: str,
    messages: Iterable[Any],
    *,
    fork: bool,
    known: Mapping[str, Event],
    held: Collection[str] = (),
    active_leaf: str | None,
    root: str | None,
    actions: Mapping[str, str] | None = None,
) -> Placement:
    """The events a root checkpoint's messages add, and where they start.

    `known` maps the ids of the events the log holds to them; `held` are ids of events accounted
    for elsewhere (the parent checkpoint's messages, a fork's source path): neither is projected
    again. `actions` maps the tool call ids of the log's actions to their event ids. Not a fork:
    the new events extend the active branch. A fork: they start after the latest (greatest seq)
    event the checkpoint's messages already have in the log, or after `root` when they have none;
    that event becomes the leaf unless it is the active leaf already.
    """
    every = project_messages(conversation_id, messages, (), dict(actions or {}))
    new = [p for p in every if p.id not in known and p.id not in held]
    ids = frozenset(p.id for p in every)
    if not fork:
        return Placement(None, new, ids)
    had = [(known[p.id].seq, p.id) for p in every if p.id in known]
    anchor = max(had)[1] if had else root
    return Placement(anchor if anchor != active_leaf else None, new, ids)


def event_ids(conversation_id: str, messages: Iterable[Any]) -> set[str]:
    """The ids of the events `messages` project to (whether or not the log holds them)."""
    return {p.id for p in project_messages(conversation_id, messages, (), {})}


def projected_event(path: Sequence[Event]) -> Event | None:
    """The event a branch or fork at the last event of `path` (root first) starts after, in graph
    terms: that event if a message projected it, else the nearest such event before it."""
    return next((e for e in reversed(path) if e.kind in PROJECTED_KINDS), None)
