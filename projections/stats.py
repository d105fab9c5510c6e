"""Per-conversation statistics: counts, LLM usage and cost, tool calls, errors, status, time.

A pure fold of small aggregates (O(1) per event). Duplicates (seq ≤ last, or a re-delivered
annotation) are not counted twice; a gap raises `SequenceGapError`, an event of another tenant
`TenantMismatchError`, another event at the last seq `SequenceConflictError` (`_sequence`).

Sums saturate: a token total stays within a 64-bit integer (the store's BIGINT) and a cost or
latency total stays a finite float, whatever the events say (a NaN adds nothing). Refusing the
event instead would leave a gap in every projection that folds the conversation after it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from convdb.projections._sequence import ANNOTATION_SEQ, check_member, is_next
from convdb.schemas._types import ExecutionStatus
from convdb.schemas.events import EVENT_KINDS, Event

_KIND_INDEX = {kind: i for i, kind in enumerate(EVENT_KINDS)}
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""The range of every integer figure (a BIGINT column)."""
_FLOAT_MAX = sys.float_info.max


class ConversationStats(NamedTuple):
    """Statistics of one conversation (immutable)."""

    conversation_id: str
    tenant_id: str | None = None
    last_seq: int = 0
    events: int = 0
    """Events counted (chain events and annotations, each once)."""
    counts: tuple[int, ...] = (0,) * len(EVENT_KINDS)
    """Events per kind, aligned with `convdb.schemas.events.EVENT_KINDS` (see `counts_by_kind`)."""
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
    last_id: str | None = None
    """Id of the event at `last_seq`: another id at that seq is a conflict, not a redelivery."""

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
        SequenceConflictError: another event id at the last seq.
        ConversationMismatchError: the event belongs to another conversation.
        TenantMismatchError: the event names another tenant than the conversation's first event.
    """
    annotations = state.annotations
    last_seq, last_id = state.last_seq, state.last_id
    if event.seq == ANNOTATION_SEQ:
        check_member(state.conversation_id, state.tenant_id, event)
        if event.id in annotations:
            return state
        annotations = annotations | {event.id}
    elif is_next(state.conversation_id, last_seq, event, owner=state.tenant_id, last_id=last_id):
        last_seq, last_id = event.seq, event.id
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
        last_id=last_id,
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
    first, last, annotations, last_id = s.first_timestamp, s.last_timestamp, s.annotations, s.last_id
    for event in events:
        seq = event.seq
        if seq == last_seq + 1 and event.conversation_id == conv and event.tenant_id == tenant:
            last_seq, last_id = seq, event.id  # the common case, checked inline
        elif seq == ANNOTATION_SEQ:
            check_member(conv, tenant, event)
            if event.id in annotations:
                continue
            annotations = annotations | {event.id}
        elif is_next(conv, last_seq, event, owner=tenant, last_id=last_id):
            last_seq, last_id = seq, event.id
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
        conv, tenant, last_seq, count, tuple(counts), *usage, tools, errors, status, first, last, annotations,
        last_id,
    )  # fmt: skip


def _usage_added(usage: tuple[Any, ...], event: Any) -> tuple[Any, ...]:
    """(llm_calls, prompt, completion, cached tokens, cost, unpriced calls, latency) plus one call."""
    calls, prompt, completion, cached, cost, unpriced, latency = usage
    prompt += event.prompt_tokens
    completion += event.completion_tokens
    cached += event.cached_tokens
    # Comparisons inline, no call unless a bound is passed: this runs for every LLM call folded.
    if not (
        INT64_MIN <= prompt <= INT64_MAX
        and INT64_MIN <= completion <= INT64_MAX
        and INT64_MIN <= cached <= INT64_MAX
    ):
        prompt, completion, cached = _saturated(prompt), _saturated(completion), _saturated(cached)
    price = event.cost
    if price is None or price != price:  # unpriced, or NaN: no usable price
        unpriced += 1
    else:
        cost = _float_sum(cost, price)
    return (calls + 1, prompt, completion, cached, cost, unpriced, _float_sum(latency, event.latency_ms))


def _saturated(total: int) -> int:
    """`total` within the 64-bit range."""
    return INT64_MAX if total > INT64_MAX else INT64_MIN if total < INT64_MIN else total


def _float_sum(total: float, value: float) -> float:
    """`total + value`, saturated to the finite floats; a NaN adds nothing."""
    result = total + value
    if -_FLOAT_MAX <= result <= _FLOAT_MAX:
        return result
    if result != result:  # NaN
        return total if total == total else 0.0
    return _FLOAT_MAX if result > 0 else -_FLOAT_MAX


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
    calls, prompt, completion, cached, cost, unpriced, latency = _usage_added(state[5:12], event)
    return state._replace(
        llm_calls=calls,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached,
        cost=cost,
        unpriced_calls=unpriced,
        llm_latency_ms=latency,
    )


# Dispatch on `kind`, not isinstance (slow on pydantic models); other kinds are only counted.
_UPDATES: dict[str, Any] = {
    "llm_usage": _llm_usage,
    "action": lambda s, _e: s._replace(tool_calls=s.tool_calls + 1),
    "agent_error": lambda s, _e: s._replace(errors=s.errors + 1),
    "observation": lambda s, e: s._replace(errors=s.errors + 1) if e.is_error else s,
    "state_update": lambda s, e: s._replace(execution_status=e.execution_status),
}
