"""The mapping's per-conversation state, and rebuilding it from a conversation's events."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from immutables import Map

from convdb.projections._sequence import ANNOTATION_SEQ
from convdb.projections.openhands._kinds import ORIGIN
from convdb.projections.openhands._usage import Totals
from convdb.projections.view import ViewState
from convdb.projections.view import initial as initial_view
from convdb.schemas._types import EffectClass


class OpenHandsState(NamedTuple):
    """A conversation as the OpenHands mapping sees it (immutable)."""

    view: ViewState
    tenant_id: str
    last_node: str | None = None
    """The last tree event appended (the parent of a legacy event that names none)."""
    status: str | None = None
    title: str | None = None
    usage: Map[str, Totals] = Map()
    """Usage counted so far per OpenHands usage id."""
    effect_classes: Map[str, EffectClass] = Map()
    """Effect class per tool name, from the tool annotations of the system prompt."""
    duplicates: int = 0
    """OpenHands events skipped because the conversation already held their id."""


def marks_of(extension: str | None) -> dict[str, Any] | None:
    """What an event's `extension` says about its OpenHands origin (None: not from OpenHands, or
    an extension that is no JSON object, which nothing convdb writes holds)."""
    if not extension:
        return None
    try:
        found = json.loads(extension)
    except ValueError:
        return None
    marks = found.get(ORIGIN) if isinstance(found, dict) else None
    return marks if isinstance(marks, dict) else None


def initial(conversation_id: str, tenant_id: str) -> OpenHandsState:
    """A conversation with no event yet."""
    return OpenHandsState(initial_view(conversation_id), tenant_id)


def effect_classes(tools: Any) -> Map[str, EffectClass]:
    """Effect class per tool from its MCP annotations (readOnlyHint, idempotentHint)."""
    found: dict[str, EffectClass] = {}
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        name = tool.get("title") or tool.get("name")
        annotations = tool.get("annotations")
        hints = annotations if isinstance(annotations, dict) else {}
        if isinstance(name, str):
            if hints.get("readOnlyHint") is True:
                found[name] = "read_only"
            elif hints.get("idempotentHint") is True:
                found[name] = "idempotent"
    return Map(found)


def resume(view: ViewState, tenant_id: str) -> OpenHandsState:
    """The mapping's state of a conversation rebuilt from its events (after a restore)."""
    state = OpenHandsState(view, tenant_id)
    usage: dict[str, list[float]] = {}
    for event in view.log:
        marks = marks_of(event.extension) or {}
        if event.seq != ANNOTATION_SEQ and event.kind != "active_leaf_changed":
            state = state._replace(last_node=event.id)
        if event.kind == "state_update":
            state = state._replace(status=event.execution_status)
        elif event.kind == "title":
            state = state._replace(title=event.title)
        elif event.kind == "system_prompt" and "patch" in marks:
            state = state._replace(effect_classes=effect_classes(marks["patch"].get("=", {}).get("tools")))
        elif event.kind == "llm_usage" and "usage_id" in marks:
            sums = usage.setdefault(marks["usage_id"], [0, 0, 0, 0.0])
            for i, value in enumerate(
                (
                    event.prompt_tokens,
                    event.completion_tokens,
                    event.cached_tokens,
                    event.cost or 0.0,
                )
            ):
                sums[i] += value
    totals = Map({k: (int(v[0]), int(v[1]), int(v[2]), float(v[3])) for k, v in usage.items()})
    return state._replace(usage=totals)
