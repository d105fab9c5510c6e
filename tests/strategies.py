"""Hypothesis strategies that build valid conversations (STYLE §8); reuse them anywhere.

A conversation is a list of events in log order: chain events with seq 1, 2, ... (no gap),
non-decreasing timestamps, a `parent_id` tree that is mostly linear with occasional branch
switches (`ActiveLeafChangedEvent`), implicit branches (a parent other than the leaf),
condensations of earlier events on the active path, an optional `ForkEvent` root, and
`TitleEvent` annotations with seq 0. Every event kind appears in realistic proportions.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from convdb.schemas.events import (
    ActionEvent,
    ActiveLeafChangedEvent,
    AgentErrorEvent,
    CondensationEvent,
    Event,
    ForkEvent,
    LLMUsageEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    StateUpdateEvent,
    SystemPromptEvent,
    TitleEvent,
    UserRejectEvent,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
"""Timestamp of the first event of every generated conversation."""

texts = st.text(alphabet="abc xyz\n\tÅé😀.", max_size=80)
"""Short texts with spaces, newlines, tabs and non-ASCII (for titles and summaries)."""

# Weighted: mostly messages, actions and observations, rarely switches and condensations.
_STEPS = (
    ("message",) * 6
    + ("action",) * 4
    + ("observation",) * 4
    + ("llm_usage",) * 3
    + ("state_update", "agent_error", "user_reject", "pause", "title", "branch")
    + ("condensation", "condensation", "switch", "switch")
)


@dataclass
class _Builder:
    """Mutable bookkeeping while drawing one conversation (never leaves this module)."""

    conversation_id: str
    tenant_id: str
    seq: int = 0
    titles: int = 0
    clock: datetime = T0
    leaf: str | None = None
    parents: dict[str, str | None] = field(default_factory=dict)
    actions: list[ActionEvent] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def envelope(self, draw: st.DrawFn, source: str, parent_id: str | None) -> dict[str, Any]:
        self.seq += 1
        self.clock += timedelta(microseconds=draw(st.sampled_from((0, 1, 250, 100_000))))
        return {
            "id": f"{self.conversation_id}:{self.seq}",
            "conversation_id": self.conversation_id,
            "tenant_id": self.tenant_id,
            "seq": self.seq,
            "timestamp": self.clock,
            "source": source,
            "parent_id": parent_id,
        }

    def add_node(self, event: Event) -> None:
        """Record a tree node that becomes the active leaf."""
        self.events.append(event)
        self.parents[event.id] = None if isinstance(event, ForkEvent) else event.parent_id
        self.leaf = event.id

    def active_path(self) -> list[str]:
        path: list[str] = []
        node = self.leaf
        while node is not None:
            path.append(node)
            node = self.parents[node]
        return path[::-1]


def _root(draw: st.DrawFn, b: _Builder) -> Event:
    if draw(st.integers(0, 4)) == 0:
        source_event = f"{b.conversation_id}-origin:{draw(st.integers(1, 50))}"
        # A fork may name its source event as parent: that id is in another conversation.
        parent = draw(st.sampled_from((None, source_event)))
        return ForkEvent(
            **b.envelope(draw, "user", parent),
            source_conversation_id=f"{b.conversation_id}-origin",
            source_event_id=source_event,
            workspace_shared=draw(st.booleans()),
        )
    return SystemPromptEvent(
        **b.envelope(draw, "agent", None), content=draw(texts), tools=("tracker", "shell")
    )


def _action(draw: st.DrawFn, b: _Builder) -> ActionEvent:
    env = b.envelope(draw, "agent", b.leaf)
    tool = draw(st.sampled_from(("shell", "tracker", "files")))
    arguments = json.dumps({"n": draw(st.integers(0, 9))}, sort_keys=True, separators=(",", ":"))
    action = ActionEvent(
        **env,
        tool_name=tool,
        tool_call_id=f"call-{env['seq']}",
        arguments=arguments,
        thought=draw(texts),
        llm_response_id=f"resp-{env['seq']}",
        security_risk=draw(st.sampled_from(("unknown", "low", "medium", "high"))),
        operation_id=f"{b.conversation_id}/{env['id']}",
        intent_hash=hashlib.sha256((tool + arguments).encode()).hexdigest(),
        target="tracker:issues" if tool == "tracker" else None,
        effect_class=draw(st.sampled_from(("read_only", "idempotent", "keyed", "irreversible"))),
    )
    b.actions.append(action)
    return action


def _observation(draw: st.DrawFn, b: _Builder) -> Event:
    if not b.actions:
        return _message(draw, b)
    action = b.actions.pop(0)
    return ObservationEvent(
        **b.envelope(draw, "environment", b.leaf),
        action_id=action.id,
        tool_name=action.tool_name,
        tool_call_id=action.tool_call_id,
        content=draw(texts),
        is_error=draw(st.integers(0, 3)) == 0,
        provider_receipt=draw(st.none() | st.just(f"rcpt-{action.id}")),
        backfilled=draw(st.integers(0, 5)) == 0,
    )


def _message(draw: st.DrawFn, b: _Builder, parent: str | None = None) -> MessageEvent:
    role = draw(st.sampled_from(("user", "user", "assistant")))
    env = b.envelope(draw, "user" if role == "user" else "agent", parent or b.leaf)
    llm_response = None if role == "user" else f"resp-{env['seq']}"
    return MessageEvent(**env, role=role, content=draw(texts), llm_response_id=llm_response)


def _condensation(draw: st.DrawFn, b: _Builder) -> CondensationEvent:
    earlier = b.active_path()[1:]  # keep the root, as condensers keep the system prompt
    forgotten = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=6)) if earlier else []
    if draw(st.integers(0, 4)) == 0:
        forgotten.append(f"{b.conversation_id}:elsewhere")  # ids off the path are ignored
    return CondensationEvent(
        **b.envelope(draw, "agent", b.leaf),
        forgotten_event_ids=tuple(forgotten),
        summary=draw(st.none() | texts),
    )


def _usage(draw: st.DrawFn, b: _Builder) -> LLMUsageEvent:
    env = b.envelope(draw, "agent", b.leaf)
    return LLMUsageEvent(
        **env,
        model=draw(st.sampled_from(("gpt-4o-mini", "claude-3-5-haiku", "local/scripted"))),
        llm_response_id=f"resp-{env['seq']}",
        prompt_tokens=draw(st.integers(0, 5000)),
        completion_tokens=draw(st.integers(0, 800)),
        cost=draw(st.none() | st.sampled_from((0.0, 0.00025, 0.0131, 0.5))),
        latency_ms=draw(st.sampled_from((0.0, 12.5, 480.0, 2310.25))),
        cached_tokens=draw(st.integers(0, 100)),
    )


def _title(draw: st.DrawFn, b: _Builder) -> TitleEvent:
    """An annotation (seq 0): does not take a chain seq, the builder's seq is untouched."""
    b.titles += 1
    origin = draw(st.sampled_from(("llm", "first_message")))
    return TitleEvent(
        id=f"{b.conversation_id}:title-{b.titles}",
        conversation_id=b.conversation_id,
        tenant_id=b.tenant_id,
        seq=0,
        timestamp=b.clock,
        source="hook",
        title=draw(texts),
        origin=origin,
        model="gpt-4o-mini" if origin == "llm" else None,
    )


def _step(draw: st.DrawFn, b: _Builder) -> None:
    """Append one event of a drawn kind."""
    kind = draw(st.sampled_from(_STEPS))
    leaf = b.leaf
    if kind == "title":
        b.events.append(_title(draw, b))
    elif kind == "switch":
        nodes = [n for n in b.parents if n != leaf]
        if not nodes:
            return _step(draw, b)
        target = draw(st.sampled_from(nodes))
        b.events.append(ActiveLeafChangedEvent(**b.envelope(draw, "user", leaf), leaf_event_id=target))
        b.leaf = target
    else:
        b.add_node(_node(draw, b, kind))
    return None


def _node(draw: st.DrawFn, b: _Builder, kind: str) -> Event:
    match kind:
        case "action":
            return _action(draw, b)
        case "observation":
            return _observation(draw, b)
        case "condensation":
            return _condensation(draw, b)
        case "llm_usage":
            return _usage(draw, b)
        case "branch":
            return _message(draw, b, parent=draw(st.sampled_from(sorted(b.parents))))
        case "state_update":
            status = draw(st.sampled_from(("running", "paused", "finished", "error", "idle")))
            return StateUpdateEvent(**b.envelope(draw, "environment", b.leaf), execution_status=status)
        case "agent_error":
            return AgentErrorEvent(
                **b.envelope(draw, "agent", b.leaf), error=draw(texts), synthetic=draw(st.booleans())
            )
        case "user_reject":
            action_id = b.actions[-1].id if b.actions else f"{b.conversation_id}:none"
            return UserRejectEvent(**b.envelope(draw, "user", b.leaf), action_id=action_id)
        case "pause":
            return PauseEvent(**b.envelope(draw, "user", b.leaf), reason=draw(texts))
        case _:
            return _message(draw, b)


@st.composite
def conversations(
    draw: st.DrawFn,
    conversation_id: str | None = None,
    tenant_id: str = "tenant-a",
    min_size: int = 1,
    max_size: int = 40,
) -> list[Event]:
    """One valid conversation, in log order (chain events have seq 1..n)."""
    cid = conversation_id or draw(st.sampled_from(("conv-a", "conv-b", "conv-c", "conv-d")))
    b = _Builder(conversation_id=cid, tenant_id=tenant_id)
    b.add_node(_root(draw, b))
    size = draw(st.integers(max(min_size, 1), max(max_size, 1)))
    while len(b.events) < size:
        _step(draw, b)
    return b.events


@st.composite
def interleaved_conversations(draw: st.DrawFn, max_conversations: int = 4, max_size: int = 25) -> list[Event]:
    """Several conversations (two tenants) interleaved as on one partition; each keeps its order."""
    count = draw(st.integers(1, max_conversations))
    logs = [
        draw(conversations(conversation_id=f"conv-{i}", tenant_id=f"tenant-{i % 2}", max_size=max_size))
        for i in range(count)
    ]
    cursors = [0] * count
    merged: list[Event] = []
    while any(cursors[i] < len(logs[i]) for i in range(count)):
        i = draw(st.sampled_from([i for i in range(count) if cursors[i] < len(logs[i])]))
        merged.append(logs[i][cursors[i]])
        cursors[i] += 1
    return merged


@st.composite
def with_redeliveries(draw: st.DrawFn, events: list[Event]) -> list[Event]:
    """`events` with copies of earlier events re-delivered later (at-least-once delivery)."""
    out = list(events)
    for _ in range(draw(st.integers(0, 5)) if events else 0):
        source = draw(st.integers(0, len(out) - 1))
        out.insert(draw(st.integers(source + 1, len(out))), out[source])
    return out


def batch_splits(size: int) -> st.SearchStrategy[list[int]]:
    """Sorted cut points that split a list of `size` items into batches."""
    return st.lists(st.integers(0, size), max_size=6).map(sorted)


def split(events: list[Event], cuts: list[int]) -> list[list[Event]]:
    """Cut `events` at `cuts` (from `batch_splits`) into consecutive batches."""
    bounds = [0, *cuts, len(events)]
    return [events[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
