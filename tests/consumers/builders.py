"""Valid conversation logs for consumer tests: seq from 1, parent_id chains, mixed kinds."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

from convdb.schemas import (
    ActionEvent,
    EventEnvelope,
    LLMUsageEvent,
    MessageEvent,
    ObservationEvent,
    StateUpdateEvent,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def conversation(conv: str, n: int, tenant: str = "t1", start: datetime = T0) -> list[EventEnvelope]:
    """n events of one conversation: a user message, then agent turns (usage, action, observation)."""
    events: list[EventEnvelope] = []
    parent: str | None = None
    for seq in range(1, n + 1):
        common = {
            "id": str(uuid.uuid4()),
            "conversation_id": conv,
            "tenant_id": tenant,
            "seq": seq,
            "timestamp": start + timedelta(milliseconds=seq),
            "parent_id": parent,
        }
        events.append(_event(seq, common, events))
        parent = common["id"]
    return events


def _event(seq: int, common: dict, before: list[EventEnvelope]) -> EventEnvelope:
    if seq == 1:
        return MessageEvent(
            **common, source="user", role="user", content=f"please fix bug {common['conversation_id']}"
        )
    phase = seq % 4
    if phase == 2:
        return LLMUsageEvent(
            **common,
            source="agent",
            model="gpt-4o-mini",
            llm_response_id=f"r{seq}",
            prompt_tokens=100,
            completion_tokens=20,
            cost=0.001,
            latency_ms=12.5,
        )
    if phase == 3:
        return ActionEvent(
            **common,
            source="agent",
            tool_name="shell",
            tool_call_id=f"c{seq}",
            arguments='{"cmd":"ls"}',
            llm_response_id=f"r{seq - 1}",
            operation_id=f"{common['conversation_id']}/{common['id']}",
            intent_hash="0" * 64,
            effect_class="read_only",
        )
    if phase == 0:
        action = before[-1]
        return ObservationEvent(
            **common,
            source="environment",
            action_id=action.id,
            tool_name="shell",
            tool_call_id=getattr(action, "tool_call_id", "x"),
            content="ok",
            is_error=seq % 12 == 0,
        )
    return StateUpdateEvent(**common, source="agent", execution_status="running")


def interleaved(convs: int, per_conv: int, tenant: str = "t1") -> list[EventEnvelope]:
    """Several conversations, their events interleaved round-robin (per-conversation order kept)."""
    logs = [conversation(f"conv-{i:05d}-{uuid.uuid4().hex[:6]}", per_conv, tenant) for i in range(convs)]
    out: list[EventEnvelope] = []
    for i in range(per_conv):
        out.extend(log[i] for log in logs)
    return out


def kind_counts(events: list[EventEnvelope]) -> dict[str, dict[str, int]]:
    """True per-conversation counts by kind."""
    counts: dict[str, Counter[str]] = {}
    for e in events:
        counts.setdefault(e.conversation_id, Counter())[e.kind] += 1  # type: ignore[attr-defined]
    return {c: dict(k) for c, k in counts.items()}
