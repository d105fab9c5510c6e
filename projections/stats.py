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
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, NamedTuple

from convdb.projections._sequence import ANNOTATION_SEQ, admit
from convdb.schemas._types import ExecutionStatus
from convdb.schemas.events import EVENT_KINDS, Event, LLMUsageEvent

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""The range of every integer figure (a BIGINT column)."""
_FLOAT_MAX = sys.float_info.max


class Usage(NamedTuple):
    """LLM usage summed over a conversation's calls (immutable)."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    """USD, summed over priced calls."""
    unpriced_calls: int = 0
    """LLM calls without a cost (model not priced)."""
    llm_latency_ms: float = 0.0


_new_usage = tuple.__new__
"""Builds a `Usage` from a tuple of its fields without NamedTuple's Python-level `__new__` (3x less
time, and the fold builds one per LLM call)."""


class Parent(NamedTuple):
    """A delegated child's link to its parent, as its SystemPromptEvent records it."""

    conversation_id: str
    operation_id: str
    depth: int


DELEGATION_TOOLS = frozenset({"task", "delegate"})
"""The built-in delegation tools (`convdb.producers.tools.delegation`): a call waits for children."""

WAITING_FOR_CHILDREN = "waiting_for_children"
"""The status shown for a running conversation whose delegation call waits for its children (its log's
status stays `running`: the run is not over, a takeover checks the wait condition again)."""


class ConversationStats(NamedTuple):
    """Statistics of one conversation (immutable)."""

    conversation_id: str
    tenant_id: str | None = None
    last_seq: int = 0
    events: int = 0
    """Events counted (chain events and annotations, each once)."""
    counts: tuple[int, ...] = (0,) * len(EVENT_KINDS)
    """Events per kind, aligned with `convdb.schemas.events.EVENT_KINDS` (see `counts_by_kind`)."""
    usage: Usage = Usage()
    """LLM calls, tokens, cost and latency (`LLMUsageEvent`s)."""
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
    parent: Parent | None = None
    """Where a delegated child sits in its task tree (its first system prompt's link); None: a root."""
    delegations: frozenset[str] = frozenset()
    """Ids of its delegation actions (`DELEGATION_TOOLS`) with no observation or rejection yet."""

    @property
    def shown_status(self) -> str | None:
        """The status to show: `waiting_for_children` while a running conversation waits for its
        delegation calls, else `execution_status`."""
        if self.execution_status == "running" and self.delegations:
            return WAITING_FOR_CHILDREN
        return self.execution_status

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
    return fold_all(state, (event,))


def fold_all(state: ConversationStats, events: Iterable[Event]) -> ConversationStats:
    """Fold events in order; equal to folding them one by one (and `state` itself if none counts).

    The figures every event moves accumulate in locals, the per-kind ones in a `_Figures` that the
    kind's step (`_STEPS`) updates, and the tuple is built once: a new tuple per event cost the
    sink more than the rest of the fold.

    Raises:
        see `fold`.
    """
    s = state
    conv, tenant, last_seq, count = s.conversation_id, s.tenant_id, s.last_seq, s.events
    counts = list(s.counts)
    figures = _Figures(s.usage, s.tool_calls, s.errors, s.execution_status, s.parent, s.delegations)
    first, last, annotations, last_id = s.first_timestamp, s.last_timestamp, s.annotations, s.last_id
    kinds = _KINDS
    for event in events:
        seq = event.seq
        if seq == last_seq + 1 and event.conversation_id == conv and event.tenant_id == tenant:
            last_seq, last_id = seq, event.id  # the common case of `admit`, inline
        else:
            if not admit(conv, tenant, last_seq, event, seen=annotations, last_id=last_id):
                continue
            if seq == ANNOTATION_SEQ:
                annotations = annotations | {event.id}
            else:
                last_seq, last_id = seq, event.id
            tenant = tenant or event.tenant_id
        kind, moment = event.kind, event.timestamp
        count += 1
        i, step = kinds[kind]
        counts[i] += 1
        first = moment if first is None or moment < first else first
        last = moment if last is None or moment > last else last
        if step is not None:
            step(figures, event)
    if count == s.events:
        return state
    return ConversationStats(
        conv, tenant, last_seq, count, tuple(counts), figures.usage, figures.tool_calls, figures.errors,
        figures.execution_status, first, last, annotations, last_id, figures.parent, figures.delegations,
    )  # fmt: skip


class _Figures:
    """The per-kind figures of one `fold_all` in progress (mutable; never leaves it)."""

    __slots__ = ("usage", "tool_calls", "errors", "execution_status", "parent", "delegations")

    def __init__(
        self,
        usage: Usage,
        tool_calls: int,
        errors: int,
        execution_status: ExecutionStatus | None,
        parent: Parent | None,
        delegations: frozenset[str],
    ) -> None:
        self.usage = usage
        self.tool_calls = tool_calls
        self.errors = errors
        self.execution_status = execution_status
        self.parent = parent
        self.delegations = delegations


def _llm_call(figures: _Figures, event: LLMUsageEvent) -> None:
    """One more LLM call: token sums saturate at 64 bits, cost and latency sums stay finite."""
    calls, prompt, completion, cached, cost, unpriced, latency = figures.usage
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
    latency = _float_sum(latency, event.latency_ms)
    figures.usage = _new_usage(Usage, (calls + 1, prompt, completion, cached, cost, unpriced, latency))


def _tool_call(figures: _Figures, event: Any) -> None:
    figures.tool_calls += 1
    if event.tool_name in DELEGATION_TOOLS:
        figures.delegations = figures.delegations | {event.id}


def _agent_error(figures: _Figures, _event: Any) -> None:
    figures.errors += 1


def _observation(figures: _Figures, event: Any) -> None:
    if event.is_error:
        figures.errors += 1
    _answered(figures, event)


def _answered(figures: _Figures, event: Any) -> None:
    """An observation or a rejection answers its action: a delegation call stops waiting."""
    if event.action_id in figures.delegations:
        figures.delegations = figures.delegations - {event.action_id}


def _status_change(figures: _Figures, event: Any) -> None:
    figures.execution_status = event.execution_status


def _system_prompt(figures: _Figures, event: Any) -> None:
    """The first system prompt that names a parent links the conversation into its task tree."""
    if figures.parent is None and event.parent_conversation_id and event.parent_operation_id:
        figures.parent = Parent(
            event.parent_conversation_id, event.parent_operation_id, event.delegation_depth
        )


# Dispatch on `kind`, not isinstance (slow on pydantic models).
_STEPS: dict[str, Callable[[_Figures, Any], None]] = {
    "llm_usage": _llm_call,
    "action": _tool_call,
    "agent_error": _agent_error,
    "observation": _observation,
    "user_reject": _answered,
    "state_update": _status_change,
    "system_prompt": _system_prompt,
}
"""What an event of each kind adds beyond its count (every kind is counted in `counts`)."""

COUNTED_ONLY = frozenset(
    {
        "message",
        "condensation",
        "pause",
        "fork",
        "active_leaf_changed",
        "title",
        "external",
    }
)
"""Kinds that add nothing but their count (each kind has a step in `_STEPS` or is here)."""

_KINDS = {kind: (i, _STEPS.get(kind)) for i, kind in enumerate(EVENT_KINDS)}
"""Per kind, its place in `counts` and its step (one lookup per event)."""


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
    """The statistics as a flat JSON-able mapping (the usage figures inline, timestamps as ISO text)."""
    first, last = state.first_timestamp, state.last_timestamp
    return {
        "conversation_id": state.conversation_id,
        "tenant_id": state.tenant_id,
        "last_seq": state.last_seq,
        "events": state.events,
        "counts": state.counts_by_kind,
        **state.usage._asdict(),
        "tool_calls": state.tool_calls,
        "errors": state.errors,
        "execution_status": state.shown_status,
        "first_timestamp": None if first is None else first.isoformat(),
        "last_timestamp": None if last is None else last.isoformat(),
        "last_id": state.last_id,
        "duration_s": state.duration_s,
        "parent_conversation_id": state.parent.conversation_id if state.parent else None,
        "parent_operation_id": state.parent.operation_id if state.parent else None,
        "delegation_depth": state.parent.depth if state.parent else 0,
    }
