"""A delegating parent and its child as convdb events (for the OpenHands export of their links)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from convdb.schemas.events import (
    ActionEvent,
    Event,
    MessageEvent,
    ObservationEvent,
    StateUpdateEvent,
    SystemPromptEvent,
)

AT = datetime(2026, 5, 2, tzinfo=UTC)


def chain(cid: str, *events: tuple[type, dict[str, Any]]) -> list[Event]:
    """Events of one conversation in seq order, each the child of the one before."""
    out: list[Event] = []
    for seq, (kind, fields) in enumerate(events, start=1):
        out.append(
            kind(
                id=str(uuid.uuid4()), conversation_id=cid, tenant_id="t", seq=seq, timestamp=AT,
                parent_id=out[-1].id if out else None, **fields,
            )
        )  # fmt: skip
    return out


def task_tree(parent: str, child: str) -> tuple[list[Event], list[Event]]:
    """(the parent's events, the child's): the parent's `task` call started `child` and observed it."""
    operation = f"{parent}/call/child-0"
    call = {
        "source": "agent", "tool_name": "task", "tool_call_id": "c1", "arguments": '{"message":"go"}',
        "llm_response_id": "r", "operation_id": f"{parent}/call", "intent_hash": "h", "effect_class": "keyed",
    }  # fmt: skip
    result = {"children": [{"conversation_id": child, "status": "finished", "summary": "done"}]}
    parent_events = chain(
        parent,
        (SystemPromptEvent, {"source": "agent", "content": "p"}),
        (MessageEvent, {"source": "user", "role": "user", "content": "delegate"}),
        (ActionEvent, call),
    )
    observation = ObservationEvent(
        id=str(uuid.uuid4()), conversation_id=parent, tenant_id="t", seq=4, timestamp=AT,
        parent_id=parent_events[-1].id, source="environment", action_id=parent_events[-1].id,
        tool_name="task", tool_call_id="c1", content=json.dumps(result),
    )  # fmt: skip
    parent_events.append(observation)
    child_events = chain(
        child,
        (SystemPromptEvent, {"source": "agent", "content": "p", "parent_conversation_id": parent,
                             "parent_operation_id": operation, "delegation_depth": 1}),
        (MessageEvent, {"source": "user", "role": "user", "content": "go"}),
        (MessageEvent, {"source": "agent", "role": "assistant", "content": "done"}),
        (StateUpdateEvent, {"source": "environment", "execution_status": "finished"}),
    )  # fmt: skip
    return parent_events, child_events
