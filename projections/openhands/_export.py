"""A convdb conversation as an OpenHands conversation directory's contents: a pure fold.

Events that came from OpenHands are given back exactly (`rebuild` + their patch); convdb's own
events become the OpenHands kinds that stand for them (generic MCP action/observation kinds
for tools). `base_state.json` is the latest imported one, else the latest `full_state`, each
updated by the ConversationStateUpdateEvents after it; a conversation convdb ran itself gets a
minimal one (agent, workspace, status, usage, leaf, and its task-tree links as tags). What
OpenHands never stores on disk (the webhook's full_state updates and ConversationInfo posts) is
returned in `extra`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NamedTuple

from convdb.projections.openhands._arguments import expand as expand_arguments
from convdb.projections.openhands._kinds import EXPORTED_KINDS, STATE_UPDATE, rebuild
from convdb.projections.openhands._patch import apply
from convdb.projections.openhands._state import marks_of
from convdb.projections.stats import DELEGATION_TOOLS
from convdb.projections.view import fold_all, initial
from convdb.schemas.events import Event, LLMUsageEvent, ObservationEvent, SystemPromptEvent

STATE_FIELDS = frozenset(
    {
        "agent",
        "workspace",
        "persistence_dir",
        "max_iterations",
        "stuck_detection",
        "execution_status",
        "confirmation_policy",
        "security_analyzer",
        "activated_knowledge_skills",
        "activated_path_rules",
        "invoked_skills",
        "blocked_actions",
        "blocked_messages",
        "last_user_message_id",
        "leaf_event_id",
        "head_is_empty",
        "stats",
        "secret_registry",
        "tags",
        "agent_state",
        "hook_config",
    }
)
"""ConversationState fields (besides `id`) that a state update or a ConversationInfo may set."""


class OpenHandsConversation(NamedTuple):
    """What an OpenHands conversation directory holds."""

    conversation_id: str
    base_state: dict[str, Any]
    events: list[dict[str, Any]]
    """Event JSON in log order (file index = position)."""
    meta: dict[str, Any] | None
    """The agent-server's meta.json, when one was imported."""
    extra: list[dict[str, Any]]
    """Records OpenHands does not keep on disk: `{"full_state": event}`, `{"conversation_info": info}`."""


def export(conversation_id: str, events: Iterable[Event]) -> OpenHandsConversation:
    """The OpenHands form of a conversation's events (log order)."""
    out = _Exporter(conversation_id, [e for e in events if e.conversation_id == conversation_id])
    for event in out.events:
        marks = marks_of(event.extension)
        if marks is None:
            out.native(event)
        elif "record" in marks:
            out.record(marks["record"], marks.get("as"))
        elif "derived_from" not in marks:
            oh = apply(rebuild(event), marks.get("patch", {}))
            out.foreign(expand_arguments(oh, event.arguments) if event.kind == "action" else oh)
    return out.result()


_NODE_KINDS = frozenset(EXPORTED_KINDS - {"state_update"})
"""convdb kinds exported as OpenHands tree nodes (a state update is not one there)."""


class _Exporter:
    """Collects one conversation's OpenHands files while its events are read in order."""

    def __init__(self, conversation_id: str, events: list[Event]) -> None:
        self.conversation_id = conversation_id
        self.events = events
        self.by_id = {e.id: e for e in events}
        self.out: list[dict[str, Any]] = []
        self.extra: list[dict[str, Any]] = []
        self.base: dict[str, Any] | None = None
        self.meta: dict[str, Any] | None = None
        self.info: dict[str, Any] | None = None

    def native(self, event: Event) -> None:
        """An event convdb made: its OpenHands kind, hung under the nearest exported node."""
        if event.kind not in EXPORTED_KINDS:
            return
        oh = rebuild(event)
        oh.pop("parent_id", None)
        parent = self.node_at_or_above(event.parent_id)
        if parent is not None:
            oh["parent_id"] = parent
        self.out.append(oh)

    def node_at_or_above(self, event_id: str | None) -> str | None:
        """`event_id` if it is exported as a node, else its nearest such ancestor (usage records,
        titles and status changes are tree nodes in convdb, not in OpenHands)."""
        while event_id is not None:
            event = self.by_id.get(event_id)
            if event is None or event.extension is not None or event.kind in _NODE_KINDS:
                return event_id if event is not None else None
            event_id = None if event.kind == "fork" else event.parent_id
        return None

    def record(self, record: dict[str, Any], kind: str | None) -> None:
        if kind == "base_state":
            self.base = dict(record)
        elif kind == "meta":
            self.meta = record
        else:
            self.info = record
            self.extra.append({"conversation_info": record})

    def foreign(self, oh: dict[str, Any]) -> None:
        """An OpenHands event, given back as it came (state snapshots also update base_state)."""
        if oh.get("kind") == STATE_UPDATE and oh.get("key") == "full_state":
            self.extra.append({"full_state": oh})
            self.base = dict(oh["value"]) if isinstance(oh.get("value"), dict) else self.base
            return
        if oh.get("kind") == STATE_UPDATE and self.base is not None and oh.get("key") in STATE_FIELDS:
            self.base[oh["key"]] = oh.get("value")
        self.out.append(oh)

    def result(self) -> OpenHandsConversation:
        base = self.base
        if base is None:
            base = (
                _from_info(self.info)
                if self.info is not None
                else _synthesized(self.conversation_id, self.events)
            )
        leaf = self.node_at_or_above(fold_all(initial(self.conversation_id), self.events).active_leaf)
        if leaf is not None and not base.get("head_is_empty"):
            # OpenHands does not send its leaf with the events; every node appended became it, and
            # convdb's active leaf follows the same rule (and the leaves of imported states).
            base["leaf_event_id"] = leaf
        return OpenHandsConversation(self.conversation_id, base, self.out, self.meta, self.extra)


def _from_info(info: dict[str, Any]) -> dict[str, Any]:
    return {"id": info["id"], **{k: v for k, v in info.items() if k in STATE_FIELDS}}


def _synthesized(conversation_id: str, events: list[Event]) -> dict[str, Any]:
    """A base_state for a conversation convdb ran: enough for the SDK to load it."""
    status = next((e.execution_status for e in reversed(events) if e.kind == "state_update"), "idle")
    usage = [e for e in events if isinstance(e, LLMUsageEvent)]
    model = usage[-1].model if usage else "convdb/scripted"
    tools = next((list(e.tools) for e in events if e.kind == "system_prompt"), [])
    links = task_tree_tags(events)
    return {
        **({"tags": links} if links else {}),
        "id": conversation_id,
        "agent": {
            "kind": "Agent",
            "llm": {"model": model, "usage_id": "agent"},
            "tools": [{"name": t} for t in tools],
        },
        "workspace": {"kind": "LocalWorkspace", "working_dir": "workspace"},
        "execution_status": status if status != "waiting_for_human" else "paused",
        "stats": {"usage_to_metrics": {"agent": _metrics(model, usage)}}
        if usage
        else {"usage_to_metrics": {}},
    }


TAG_VALUE_MAX = 256
"""OpenHands' limit on a tag's value (`ConversationTags`: keys lowercase alphanumeric)."""


def task_tree_tags(events: list[Event]) -> dict[str, str]:
    """A conversation's task-tree links as OpenHands conversation tags, the only metadata of its
    ConversationState that is free-form (it has no parent or children field): `parentconversation`,
    `parentoperation` and `delegationdepth` for a delegated child (its system prompt's link), and
    `child0`, `child1`, ... for the children its observed delegation calls name. A value over
    OpenHands' 256 characters is left out rather than cut."""
    tags: dict[str, str] = {}
    prompt = next((e for e in events if isinstance(e, SystemPromptEvent)), None)
    if prompt is not None and prompt.parent_conversation_id and prompt.parent_operation_id:
        tags["parentconversation"] = prompt.parent_conversation_id
        tags["parentoperation"] = prompt.parent_operation_id
        tags["delegationdepth"] = str(prompt.delegation_depth)
    children = [c for e in events if isinstance(e, ObservationEvent) for c in _children(e)]
    tags.update({f"child{i}": child for i, child in enumerate(dict.fromkeys(children))})
    return {k: v for k, v in tags.items() if len(v) <= TAG_VALUE_MAX}


def _children(observation: ObservationEvent) -> list[str]:
    """The child conversations a delegation call's observation names (none for another tool's)."""
    if observation.tool_name not in DELEGATION_TOOLS:
        return []
    try:
        value = json.loads(observation.content)
    except json.JSONDecodeError:
        return []  # a refused call: its observation is the reason, no child
    kids = value.get("children") if isinstance(value, dict) else None
    return [k["conversation_id"] for k in kids or () if isinstance(k, dict) and k.get("conversation_id")]


def _metrics(model: str, usage: list[LLMUsageEvent]) -> dict[str, Any]:
    prompt = sum(e.prompt_tokens for e in usage)
    completion = sum(e.completion_tokens for e in usage)
    return {
        "model_name": model,
        "accumulated_cost": sum(e.cost or 0.0 for e in usage),
        "accumulated_token_usage": {
            "model": model,
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "cache_read_tokens": sum(e.cached_tokens for e in usage),
        },
        "token_usages": [
            {
                "model": e.model,
                "prompt_tokens": e.prompt_tokens,
                "completion_tokens": e.completion_tokens,
                "cache_read_tokens": e.cached_tokens,
                "response_id": e.llm_response_id,
            }
            for e in usage
        ],
    }
