"""Per-conversation statistics: counts, LLM usage and cost, tool calls, errors, status, time.

A pure fold of small aggregates (O(1) per event). Duplicates (seq ≤ last, or a re-delivered
annotation) are not counted twice; a gap raises `SequenceGapError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from projections._sequence import ANNOTATION_SEQ, is_next
from projections.errors import ConversationMismatchError
from schemas._types import ExecutionStatus
from schemas.events import EVENT_KINDS, Event

_KIND_INDEX = {kind: i for i, kind in enumerate(EVENT_KINDS)}


class ConversationStats(NamedTuple):
    """Statistics of one conversation (immutable)."""

    conversation_id: str
    tenant_id: str | None = None
    last_seq: int = 0
    events: int = 0
    """Events counted (chain events and annotations, each once)."""
    counts: tuple[int, ...] = (0,) * len(EVENT_KINDS)
    """Events per kind, aligned with `schemas.events.EVENT_KINDS` (see `counts_by_kind`)."""
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    """USD, summed over priced calls."""
    unpriced_calls: int = 0
    """LLM calls without a cost (model not priced)."""
    llm_latency_ms: float = 0.0
    tool_calls: int = 0
    """`ActionEvent`s."""
    errors: int = 0
    """`AgentErrorEvent`s plus `ObservationEvent`s with `is_error`."""
    execution_status: ExecutionStatus | None = None
    """Status of the last `StateUpdateEvent`, None before any."""
    first_timestamp: datetime | None = None
    last_timestamp: datetime | None = None
    annotations: frozenset[str] = frozenset()
    """Ids of the annotations (seq 0) counted, so a re-delivery is not counted again."""

    @property
    def counts_by_kind(self) -> dict[str, int]:
        """Non-zero counts by event kind."""
        return {kind: n for kind, n in zip(EVENT_KINDS, self.counts, strict=True) if n}

    @property
    def duration_s(self) -> float:
        """Seconds from the first to the last event (0 before two events)."""
        if self.first_timestamp is None or self.last_timestamp is None:
            return 0.0
        return (self.last_timestamp - self.first_timestamp).total_seconds()


def initial(conversation_id: str) -> ConversationStats:
    """The statistics of a conversation before its first event."""
    return ConversationStats(conversation_id)


def fold(state: ConversationStats, event: Event) -> ConversationStats:
    """Fold one event; duplicates return `state` unchanged.

    Raises:
        SequenceGapError: seq > last seq + 1.
        ConversationMismatchError: the event belongs to another conversation.
    """
    annotations = state.annotations
    last_seq = state.last_seq
    if event.seq == ANNOTATION_SEQ:
        if event.conversation_id != state.conversation_id:
            raise ConversationMismatchError(
                f"event {event.id} (kind {event.kind}) belongs to conversation "
                f"{event.conversation_id}, not {state.conversation_id}"
            )
        if event.id in annotations:
            return state
        annotations = annotations | {event.id}
    elif is_next(state.conversation_id, last_seq, event):
        last_seq = event.seq
    else:
        return state
    i = _KIND_INDEX[event.kind]
    moment = event.timestamp
    first, last = state.first_timestamp, state.last_timestamp
    counted = state._replace(
        tenant_id=state.tenant_id or event.tenant_id,
        last_seq=last_seq,
        events=state.events + 1,
        counts=(*state.counts[:i], state.counts[i] + 1, *state.counts[i + 1 :]),
        first_timestamp=moment if first is None or moment < first else first,
        last_timestamp=moment if last is None or moment > last else last,
        annotations=annotations,
    )
    update = _UPDATES.get(event.kind)
    return counted if update is None else update(counted, event)


def fold_all(state: ConversationStats, events: Iterable[Event]) -> ConversationStats:
    """Fold events in order; equal to folding them one by one (and `state` itself if none counts).

    The figures accumulate in locals and the tuple is built once: `_replace` per event cost
    the sink more than the rest of the fold.
    """
    s = state
    conv, tenant, last_seq, count = s.conversation_id, s.tenant_id, s.last_seq, s.events
    counts = list(s.counts)
    usage = s[5:12]  # llm_calls .. llm_latency_ms, in field order
    tools, errors, status = s.tool_calls, s.errors, s.execution_status
    first, last, annotations = s.first_timestamp, s.last_timestamp, s.annotations
    for event in events:
        if event.seq == ANNOTATION_SEQ:
            if event.conversation_id != conv:
                raise ConversationMismatchError(
                    f"event {event.id} (kind {event.kind}) belongs to conversation "
                    f"{event.conversation_id}, not {conv}"
                )
            if event.id in annotations:
                continue
            annotations = annotations | {event.id}
        elif is_next(conv, last_seq, event):
            last_seq = event.seq
        else:
            continue
        kind, moment = event.kind, event.timestamp
        tenant = tenant or event.tenant_id
        count += 1
        counts[_KIND_INDEX[kind]] += 1
        first = moment if first is None or moment < first else first
        last = moment if last is None or moment > last else last
        if kind == "llm_usage":
            usage = _usage_added(usage, event)
        elif kind == "action":
            tools += 1
        elif kind == "agent_error" or (kind == "observation" and event.is_error):  # type: ignore[union-attr]
            errors += 1
        elif kind == "state_update":
            status = event.execution_status  # type: ignore[union-attr]
    if count == s.events:
        return state
    return ConversationStats(
        conv, tenant, last_seq, count, tuple(counts), *usage, tools, errors, status, first, last, annotations
    )


def _usage_added(usage: tuple[Any, ...], event: Any) -> tuple[Any, ...]:
    """(llm_calls, prompt, completion, cached tokens, cost, unpriced calls, latency) plus one call."""
    calls, prompt, completion, cached, cost, unpriced, latency = usage
    priced = event.cost is not None
    return (
        calls + 1,
        prompt + event.prompt_tokens,
        completion + event.completion_tokens,
        cached + event.cached_tokens,
        cost + event.cost if priced else cost,
        unpriced + (0 if priced else 1),
        latency + event.latency_ms,
    )


def as_row(state: ConversationStats) -> dict[str, Any]:
    """The statistics as a flat JSON-able mapping (timestamps as ISO text)."""
    row = state._asdict()
    row.pop("annotations")
    row["counts"] = state.counts_by_kind
    row["duration_s"] = state.duration_s
    for key in ("first_timestamp", "last_timestamp"):
        row[key] = None if row[key] is None else row[key].isoformat()
    return row


def _llm_usage(state: ConversationStats, event: Any) -> ConversationStats:
    priced = event.cost is not None
    return state._replace(
        llm_calls=state.llm_calls + 1,
        prompt_tokens=state.prompt_tokens + event.prompt_tokens,
        completion_tokens=state.completion_tokens + event.completion_tokens,
        cached_tokens=state.cached_tokens + event.cached_tokens,
        cost=state.cost + event.cost if priced else state.cost,
        unpriced_calls=state.unpriced_calls + (0 if priced else 1),
        llm_latency_ms=state.llm_latency_ms + event.latency_ms,
    )


# Dispatch on `kind`, not isinstance (slow on pydantic models); other kinds are only counted.
_UPDATES: dict[str, Any] = {
    "llm_usage": _llm_usage,
    "action": lambda s, _e: s._replace(tool_calls=s.tool_calls + 1),
    "agent_error": lambda s, _e: s._replace(errors=s.errors + 1),
    "observation": lambda s, e: s._replace(errors=s.errors + 1) if e.is_error else s,
    "state_update": lambda s, e: s._replace(execution_status=e.execution_status),
}
