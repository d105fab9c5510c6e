"""What the log decides, checked by every fold alike: the owner's tenant, one event per seq.

For each projection that folds events (view, its tip, stats, titles, the chain the index and
the effects fold, the operation machine): an event of another tenant, or another event id at a
seq already folded, raises the documented data error (`TenantMismatchError`,
`SequenceConflictError`) and leaves the state as it was; the same event again is a redelivery;
the conversation's own next event is folded after the refusal as if it had never come.
Stats stay within the 64-bit bounds whatever the events' integers and floats.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convdb.projections import chain, stats, titles, view
from convdb.projections.effects import fold as fold_operation
from convdb.projections.effects import initial as initial_operation
from convdb.projections.errors import ProjectionError, SequenceConflictError, TenantMismatchError
from convdb.projections.view_tip import extend_tip, tip
from convdb.schemas.events import ActionEvent, Event, LLMUsageEvent
from convdb.schemas.records import EffectProposed
from tests.strategies import T0, conversations

Folds = tuple[Callable[[str], Any], Callable[[Any, Event], Any], Callable[[Any, list[Event]], Any]]
FOLDS: dict[str, Folds] = {
    "view": (view.initial, view.fold, view.fold_all),
    "stats": (stats.initial, stats.fold, stats.fold_all),
    "titles": (titles.initial, titles.fold, titles.fold_all),
}
"""The per-conversation folds, with their batched fold_all."""

_folds = st.sampled_from(sorted(FOLDS))


def forged(event: Event, **changes: Any) -> Event:
    """A copy of `event` with other envelope values (a forger's, or a second writer's)."""
    return event.model_copy(update=changes)


def chain_events(events: list[Event]) -> list[Event]:
    return [e for e in events if e.seq > 0]


@given(conversations(min_size=2), _folds, st.data())
def test_another_tenants_event_at_the_next_seq_is_refused_and_changes_nothing(
    events: list[Event], name: str, data: st.DataObject
) -> None:
    initial, fold, fold_all = FOLDS[name]
    cut = data.draw(st.integers(1, len(events) - 1))
    before = fold_all(initial(events[0].conversation_id), events[:cut])
    following = events[cut]
    intruder = forged(following, tenant_id="tenant-z", id=f"{following.id}-forged")
    with pytest.raises(TenantMismatchError, match="tenant-z"):
        fold(before, intruder)
    with pytest.raises(TenantMismatchError):
        fold_all(before, [intruder])
    # The conversation's own event with that seq is folded as if the forgery never came.
    assert fold(before, following) == fold_all(initial(events[0].conversation_id), events[: cut + 1])


@given(conversations(min_size=2), _folds, st.data())
def test_another_event_at_the_last_seq_is_a_conflict_the_same_event_a_redelivery(
    events: list[Event], name: str, data: st.DataObject
) -> None:
    initial, fold, fold_all = FOLDS[name]
    cut = data.draw(st.integers(1, len(events)))
    before = fold_all(initial(events[0].conversation_id), events[:cut])
    last = chain_events(events[:cut])[-1]
    second = forged(last, id=f"{last.id}-second")
    with pytest.raises(SequenceConflictError, match=f"has seq {last.seq}, which the log already gave"):
        fold(before, second)
    assert fold(before, last) == before  # the same event again: an idempotent redelivery


@given(conversations(min_size=3), st.data())
def test_the_view_tells_a_conflict_at_any_earlier_seq(events: list[Event], data: st.DataObject) -> None:
    """The view keeps every id, so any seq already folded with another id is a conflict."""
    state = view.fold_all(view.initial(events[0].conversation_id), events)
    earlier = data.draw(st.sampled_from(chain_events(events)))
    with pytest.raises(SequenceConflictError):
        view.fold(state, forged(earlier, id=f"{earlier.id}-late"))
    assert view.fold(state, earlier) is state


@given(conversations(min_size=2), st.data())
def test_a_tip_declines_another_tenants_event_and_the_full_fold_refuses_it(
    events: list[Event], data: st.DataObject
) -> None:
    cut = data.draw(st.integers(1, len(events) - 1))
    state = view.fold_all(view.initial(events[0].conversation_id), events[:cut])
    intruder = forged(events[cut], tenant_id="tenant-z", id="forged")
    assert extend_tip(tip(state), [intruder]) is None
    with pytest.raises(TenantMismatchError):
        view.fold_all(state, [intruder])


@given(conversations(min_size=2), st.data())
def test_the_chain_refuses_what_the_folds_refuse(events: list[Event], data: st.DataObject) -> None:
    state = chain.initial(events[0].conversation_id)
    for event in events:
        state = chain.fold(state, event) or state
    last = chain_events(events)[-1]
    assert state == chain.Chain(last.conversation_id, last.tenant_id, last.seq, last.id)
    assert chain.fold(state, last) is None  # a redelivery
    with pytest.raises(SequenceConflictError):
        chain.fold(state, forged(last, id="second"))
    nxt = forged(last, seq=last.seq + 1, id="next")
    with pytest.raises(TenantMismatchError):
        chain.fold(state, forged(nxt, tenant_id="tenant-z"))
    assert chain.fold(state, nxt) == state._replace(last_seq=last.seq + 1, last_id="next")
    earlier = data.draw(st.sampled_from(chain_events(events)))
    with pytest.raises(SequenceConflictError):  # told by the ids the caller knows (the index's)
        chain.fold(state, forged(earlier, id="late"), known={e.id for e in events})


def test_a_negative_seq_is_refused_with_its_own_reason() -> None:
    events = [usage(1, 5), usage(2, 5)]
    state = stats.fold_all(stats.initial("c"), events)
    with pytest.raises(SequenceConflictError, match="negative seq"):
        stats.fold(state, usage(-3, 5))


def test_an_operation_refuses_an_action_of_another_tenant_than_its_ledgers() -> None:
    action = ActionEvent(
        id="a1", conversation_id="c", tenant_id="acme", seq=2, timestamp=T0, source="agent",
        tool_name="notify", tool_call_id="k", arguments="{}", llm_response_id="r", operation_id="c/a1",
        intent_hash="h", effect_class="irreversible",
    )  # fmt: skip
    proposed = EffectProposed(
        id="p1", operation_id="c/a1", conversation_id="c", tenant_id="acme", timestamp=T0, action_id="a1",
        tool_name="notify", intent_hash="h", effect_class="irreversible", reconcile_after=T0,
    )  # fmt: skip
    takeover = action.model_copy(update={"tenant_id": "umbrella", "tool_name": "steal"})
    ledgered = fold_operation(initial_operation("c/a1"), proposed)
    state = fold_operation(ledgered, action)
    with pytest.raises(TenantMismatchError, match="umbrella"):
        fold_operation(state, takeover)
    # Events and ledger come on different topics: a takeover before the ledger is forgotten by it.
    early = fold_operation(fold_operation(initial_operation("c/a1"), takeover), proposed)
    assert (early.tenant_id, early.tool_name, early.arguments) == ("acme", "notify", "")
    assert fold_operation(early, action) == state


# --- stats within bounds --------------------------------------------------------------------

INT64 = (-(2**63), 2**63 - 1)
_tokens = st.integers(*INT64)
_floats = st.floats(allow_nan=True, allow_infinity=True) | st.none()


def usage(seq: int, tokens: int, cost: float | None = 0.01, latency: float = 1.0) -> LLMUsageEvent:
    return LLMUsageEvent(
        id=f"u{seq}", conversation_id="c", tenant_id="t", seq=seq, timestamp=T0, source="agent",
        model="m", llm_response_id=f"r{seq}", prompt_tokens=tokens, completion_tokens=tokens,
        cached_tokens=tokens, cost=cost, latency_ms=latency,
    )  # fmt: skip


@given(st.lists(st.tuples(_tokens, _floats, st.floats(allow_nan=True, allow_infinity=True)), max_size=12))
def test_stats_stay_within_64_bits_and_finite_whatever_the_events(
    calls: list[tuple[int, float | None, float]],
) -> None:
    events = [usage(i + 1, tokens, cost, latency) for i, (tokens, cost, latency) in enumerate(calls)]
    state = stats.fold_all(stats.initial("c"), events)
    used = state.usage
    for figure in (used.prompt_tokens, used.completion_tokens, used.cached_tokens, used.llm_calls):
        assert INT64[0] <= figure <= INT64[1]
    assert math.isfinite(state.usage.cost) and math.isfinite(state.usage.llm_latency_ms)
    one_by_one = stats.initial("c")
    for event in events:
        one_by_one = stats.fold(one_by_one, event)
    assert one_by_one == state
    exact = sum(tokens for tokens, _, _ in calls)
    if INT64[0] <= exact <= INT64[1] and all(
        INT64[0] <= sum(t for t, _, _ in calls[:k]) <= INT64[1] for k in range(len(calls) + 1)
    ):
        assert state.usage.prompt_tokens == exact  # saturation only where the exact sum leaves the range
    priced = [c for _, c, _ in calls if c is not None and not math.isnan(c)]
    assert state.usage.unpriced_calls == len(calls) - len(priced)


def test_stats_saturate_at_the_bound_and_stay_there() -> None:
    top = 2**63 - 1
    state = stats.fold_all(stats.initial("c"), [usage(1, top), usage(2, top), usage(3, 5)])
    assert state.usage.prompt_tokens == top and state.usage.cached_tokens == top
    low = stats.fold_all(stats.initial("c"), [usage(1, -top - 1), usage(2, -5)])
    assert low.usage.prompt_tokens == -(2**63)
    nan = stats.fold_all(stats.initial("c"), [usage(1, 1, math.nan, math.nan), usage(2, 1, 0.5, math.inf)])
    assert nan.usage.cost == 0.5 and nan.usage.unpriced_calls == 1
    assert nan.usage.llm_latency_ms == sys.float_info.max


@pytest.mark.parametrize("name", sorted(FOLDS))
def test_every_refusal_is_a_projection_error(name: str) -> None:
    """The consumers dead-letter a `ProjectionError` with its message as the reason."""
    initial, fold, _ = FOLDS[name]
    first = usage(1, 1)
    state = fold(initial("c"), first)
    for bad in (forged(first, tenant_id="z", seq=2, id="x"), forged(first, id="y")):
        with pytest.raises(ProjectionError) as caught:
            fold(state, bad)
        assert "conversation" in str(caught.value)
