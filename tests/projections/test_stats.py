"""Stats projection: every figure equals a simple recount; splits and duplicates don't matter."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convdb.projections import stats
from convdb.projections._folding import fold_conversations
from convdb.projections.errors import ConversationMismatchError, SequenceGapError
from convdb.schemas.events import (
    ActionEvent,
    AgentErrorEvent,
    Event,
    LLMUsageEvent,
    MessageEvent,
    ObservationEvent,
    StateUpdateEvent,
    UserRejectEvent,
)
from tests.strategies import (
    T0,
    batch_splits,
    conversations,
    interleaved_conversations,
    split,
    with_redeliveries,
)


def build(events: list[Event]) -> stats.ConversationStats:
    return stats.fold_all(stats.initial(events[0].conversation_id), events)


@given(conversations())
def test_figures_equal_a_simple_recount(events: list[Event]) -> None:
    """Counts by kind, tokens, cost, tool calls, errors, status and times, recounted by hand."""
    state = build(events)
    usage = [e for e in events if isinstance(e, LLMUsageEvent)]
    assert state.events == len(events)
    assert state.counts_by_kind == dict(Counter(e.kind for e in events))
    assert state.usage.llm_calls == len(usage)
    assert state.usage.prompt_tokens == sum(e.prompt_tokens for e in usage)
    assert state.usage.completion_tokens == sum(e.completion_tokens for e in usage)
    assert state.usage.cached_tokens == sum(e.cached_tokens for e in usage)
    assert state.usage.cost == pytest.approx(sum(e.cost for e in usage if e.cost is not None))
    assert state.usage.unpriced_calls == sum(1 for e in usage if e.cost is None)
    assert state.usage.llm_latency_ms == pytest.approx(sum(e.latency_ms for e in usage))
    assert state.tool_calls == sum(1 for e in events if isinstance(e, ActionEvent))
    assert state.errors == sum(
        1
        for e in events
        if isinstance(e, AgentErrorEvent) or (isinstance(e, ObservationEvent) and e.is_error)
    )
    updates = [e for e in events if isinstance(e, StateUpdateEvent)]
    assert state.execution_status == (updates[-1].execution_status if updates else None)
    assert state.first_timestamp == min(e.timestamp for e in events)
    assert state.last_timestamp == max(e.timestamp for e in events)
    assert state.duration_s == (state.last_timestamp - state.first_timestamp).total_seconds()
    assert state.tenant_id == events[0].tenant_id
    json.dumps(stats.as_row(state))  # JSON-able for the store


@given(conversations(), st.data())
def test_batch_split_invariant(events: list[Event], data: st.DataObject) -> None:
    """Folding all at once equals folding in any batch split."""
    state = stats.initial(events[0].conversation_id)
    for batch in split(events, data.draw(batch_splits(len(events)))):
        state = stats.fold_all(state, batch)
    assert state == build(events)


@given(conversations(), st.data())
def test_duplicates_are_not_counted_twice(events: list[Event], data: st.DataObject) -> None:
    """Folding twice, or with redeliveries (annotations included), equals folding once."""
    once = build(events)
    assert stats.fold_all(once, events) == once
    assert build(data.draw(with_redeliveries(events))) == once


@given(conversations(), st.data())
def test_fold_all_equals_folding_one_by_one(events: list[Event], data: st.DataObject) -> None:
    """The batched fold_all (locals, one tuple) equals a loop of fold, redeliveries included."""
    log = data.draw(with_redeliveries(events))
    state = stats.initial(log[0].conversation_id)
    for event in log:
        state = stats.fold(state, event)
    assert stats.fold_all(stats.initial(log[0].conversation_id), log) == state
    assert stats.fold_all(state, events) is state  # nothing new counted: the same state


def test_fold_all_raises_as_fold_does() -> None:
    """A gap or a foreign event in a batch raises the error the one-by-one fold raises."""
    with pytest.raises(SequenceGapError, match="seq 3 after 1"):
        stats.fold_all(stats.initial("c"), [usage(1, 0.1), usage(3, 0.1)])
    foreign = usage(1, None).model_copy(update={"conversation_id": "d"})
    with pytest.raises(ConversationMismatchError):
        stats.fold_all(stats.initial("c"), [foreign])


@given(interleaved_conversations())
def test_interleaved_conversations_are_independent(events: list[Event]) -> None:
    states = fold_conversations({}, events, stats.initial, stats.fold)
    for cid, state in states.items():
        assert state == build([e for e in events if e.conversation_id == cid])


def usage(seq: int, cost: float | None) -> LLMUsageEvent:
    return LLMUsageEvent(
        id=f"u{seq}",
        conversation_id="c",
        tenant_id="t",
        seq=seq,
        timestamp=T0 + timedelta(seconds=seq),
        source="agent",
        model="m",
        llm_response_id=f"r{seq}",
        prompt_tokens=100,
        completion_tokens=10,
        cost=cost,
        latency_ms=250.0,
    )


def test_llm_usage_and_errors() -> None:
    state = stats.fold_all(stats.initial("c"), [usage(1, 0.25), usage(2, None), usage(3, 0.5)])
    assert (state.usage.llm_calls, state.usage.prompt_tokens, state.usage.completion_tokens) == (3, 300, 30)
    assert (state.usage.cost, state.usage.unpriced_calls, state.usage.llm_latency_ms) == (0.75, 1, 750.0)
    assert state.duration_s == 2.0
    with pytest.raises(SequenceGapError, match="seq 5 after 3"):
        stats.fold(state, usage(5, 0.1))
    other = MessageEvent(
        id="x",
        conversation_id="d",
        tenant_id="t",
        seq=4,
        timestamp=T0,
        source="user",
        role="user",
        content="hi",
    )
    with pytest.raises(ConversationMismatchError):
        stats.fold(state, other)


def test_a_running_conversation_whose_delegation_call_waits_shows_waiting_for_children() -> None:
    """A `task`/`delegate` action without observation shows a running conversation as
    `waiting_for_children` (its log's status stays `running`); an observation or a rejection ends
    the wait, another tool's call never starts one. The store row keeps both (shown and log status)."""
    from convdb.consumers.stats.projector import from_row, to_row

    envelope = {"conversation_id": "p", "tenant_id": "t", "timestamp": T0}

    def action(seq: int, tool: str) -> ActionEvent:
        return ActionEvent(
            id=f"a{seq}", seq=seq, source="agent", tool_name=tool, tool_call_id=f"c{seq}", arguments="{}",
            llm_response_id="r", operation_id=f"p/a{seq}", intent_hash="h", effect_class="keyed", **envelope,
        )  # fmt: skip

    def observed(seq: int, of: int) -> ObservationEvent:
        return ObservationEvent(
            id=f"o{seq}", seq=seq, source="environment", action_id=f"a{of}", tool_name="delegate",
            tool_call_id=f"c{of}", content="{}", **envelope,
        )  # fmt: skip

    running = StateUpdateEvent(id="s1", seq=1, source="environment", execution_status="running", **envelope)
    shown = []
    state = stats.fold(stats.initial("p"), running)
    steps: list[Event] = [
        action(2, "read_file"),
        observed(3, 2),
        action(4, "delegate"),
        observed(5, 4),
        action(6, "task"),
        UserRejectEvent(id="r7", seq=7, source="user", action_id="a6", **envelope),
        action(8, "task"),
    ]
    for event in steps:
        state = stats.fold(state, event)
        shown.append(state.shown_status)
        back = from_row(to_row(state))
        assert back == state, event.kind
        assert (
            stats.as_row(state)["execution_status"] == to_row(state)["execution_status"] == state.shown_status
        )
    waiting = "waiting_for_children"
    assert shown == ["running", "running", waiting, "running", waiting, "running", waiting]
    assert state.execution_status == "running"
    paused = StateUpdateEvent(id="s9", seq=9, source="environment", execution_status="paused", **envelope)
    assert stats.fold(state, paused).shown_status == "paused"
