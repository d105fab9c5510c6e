"""The view projection: named invariants (hypothesis) plus the edge cases they rely on."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convdb.projections import view
from convdb.projections._condense import condense
from convdb.projections._folding import fold_conversations
from convdb.projections.errors import ConversationMismatchError, SequenceGapError, UnknownEventError
from convdb.schemas.events import (
    ActiveLeafChangedEvent,
    CondensationEvent,
    Event,
    ForkEvent,
    MessageEvent,
    SystemPromptEvent,
)
from tests.strategies import (
    T0,
    batch_splits,
    conversations,
    interleaved_conversations,
    split,
    with_redeliveries,
)

# --- a naive reference, written independently of the fold (quadratic is fine here) ---------


def reference_leaf(events: list[Event]) -> str | None:
    """Active leaf by the rules in words: each new node becomes the leaf, a switch moves it."""
    leaf = None
    for event in events:
        if event.seq == 0:
            continue
        if isinstance(event, ActiveLeafChangedEvent):
            leaf = event.leaf_event_id
        elif isinstance(event, ForkEvent) or event.parent_id is not None or leaf is None:
            leaf = event.id
    return leaf


def reference_path(events: list[Event], leaf: str) -> list[Event]:
    by_id = {e.id: e for e in events}
    path = [by_id[leaf]]
    while path[-1].parent_id is not None and not isinstance(path[-1], ForkEvent):
        path.append(by_id[path[-1].parent_id])
    return path[::-1]


def reference_branch(path: list[Event]) -> list[str]:
    """Condensations applied in words: drop what they name, summary at the first dropped."""
    seen: list[str] = []
    for e in path:
        if not isinstance(e, CondensationEvent):
            seen.append(e.id)
            continue
        hits = [i for i, x in enumerate(seen) if x in e.forgotten_event_ids]
        seen = [x for x in seen if x not in e.forgotten_event_ids]
        if e.summary is not None:
            seen.insert(hits[0] if hits else len(seen), e.id)
    return seen


def build(events: list[Event]) -> view.ViewState:
    return view.fold_all(view.initial(events[0].conversation_id), events)


def ids(events: tuple[Event, ...] | list[Event]) -> list[str]:
    return [e.id for e in events]


# --- invariants ------------------------------------------------------------------------------


@given(conversations(), st.data())
def test_batch_split_invariant(events: list[Event], data: st.DataObject) -> None:
    """Folding all events at once equals folding them in any batch split."""
    state = view.initial(events[0].conversation_id)
    for batch in split(events, data.draw(batch_splits(len(events)))):
        state = view.fold_all(state, batch)
    assert state == build(events)


@given(conversations(), st.data())
def test_fold_all_equals_folding_one_by_one(events: list[Event], data: st.DataObject) -> None:
    """The batched fold_all equals a loop of fold, redeliveries included."""
    log = data.draw(with_redeliveries(events))
    state = view.initial(log[0].conversation_id)
    for event in log:
        state = view.fold(state, event)
    assert view.fold_all(view.initial(log[0].conversation_id), log) == state


@given(conversations(), st.data())
def test_duplicates_change_nothing(events: list[Event], data: st.DataObject) -> None:
    """Folding the log twice, or with redeliveries, equals folding it once."""
    once = build(events)
    assert view.fold_all(once, events) == once
    assert build(data.draw(with_redeliveries(events))) == once


@given(conversations(min_size=3), st.data())
def test_gap_raises(events: list[Event], data: st.DataObject) -> None:
    """Dropping a chain event makes the next chain event raise SequenceGapError."""
    chain = [i for i, e in enumerate(events) if e.seq > 0]
    if len(chain) < 2:
        return
    dropped = data.draw(st.sampled_from(chain[:-1]))
    with pytest.raises(SequenceGapError, match=f"seq {events[dropped].seq + 1} after"):
        build(events[:dropped] + events[dropped + 1 :])


@given(conversations())
def test_active_branch_is_condensed_path_to_active_leaf(events: list[Event]) -> None:
    """active_branch == path_to_root(active leaf) minus the condensed, plus summaries in place."""
    state = build(events)
    leaf = reference_leaf(events)
    assert state.active_leaf == leaf
    path = view.path_to_root(state, leaf)
    assert ids(path) == ids(reference_path(events, leaf))
    assert ids(view.active_branch(state)) == reference_branch(list(path))


@given(conversations())
def test_incremental_branch_equals_rebuild_after_every_event(events: list[Event]) -> None:
    """The tail-appended branch after each event equals the branch rebuilt from scratch."""
    state = view.initial(events[0].conversation_id)
    for event in events:
        state = view.fold(state, event)
        rebuilt = condense(view.path_to_root(state, state.active_leaf))
        assert ids(view.active_branch(state)) == ids(rebuilt)
        assert ids(state.path) == ids(reference_path(events, state.active_leaf))


@given(conversations(), st.data())
def test_view_as_of_is_view_of_prefix(events: list[Event], data: st.DataObject) -> None:
    """view_as_of(offset=k) and view_as_of(at=T) equal the view of the matching prefix."""
    k = data.draw(st.integers(0, len(events) - 1))
    prefix = build(events[: k + 1])
    assert view.view_as_of(events, offset=k) == prefix
    assert view.view_as_of([(100 + i, e) for i, e in enumerate(events)], offset=100 + k) == prefix
    at = events[k].timestamp
    last = max(i for i, e in enumerate(events) if e.timestamp <= at)
    assert view.view_as_of(events, at=at) == build(events[: last + 1])
    before = view.view_as_of(events, at=T0 - timedelta(seconds=1), conversation_id="x")
    assert before == view.initial("x")


@given(interleaved_conversations())
def test_interleaved_conversations_fold_independently(events: list[Event]) -> None:
    """Folding a partition's interleaved stream equals folding each conversation alone."""
    states = fold_conversations({}, events, view.initial, view.fold)
    for cid, state in states.items():
        own = [e for e in events if e.conversation_id == cid]
        assert state == build(own)
        assert view.view_as_of(events, conversation_id=cid) == state
        assert view.digest(state) == view.digest(build(own))


# --- edge cases the invariants rely on -------------------------------------------------------


def msg(seq: int, parent: str | None, conversation_id: str = "c", event_id: str | None = None) -> Event:
    return MessageEvent(
        id=event_id or f"e{seq}",
        conversation_id=conversation_id,
        tenant_id="t",
        seq=seq,
        timestamp=T0 + timedelta(seconds=seq),
        source="user",
        parent_id=parent,
        role="user",
        content=f"m{seq}",
    )


def switch(seq: int, leaf: str) -> Event:
    return ActiveLeafChangedEvent(
        id=f"e{seq}",
        conversation_id="c",
        tenant_id="t",
        seq=seq,
        timestamp=T0 + timedelta(seconds=seq),
        source="user",
        leaf_event_id=leaf,
    )


def test_branch_switch_and_back() -> None:
    root = SystemPromptEvent(
        id="e1", conversation_id="c", tenant_id="t", seq=1, timestamp=T0, source="agent", content="s"
    )
    state = view.fold_all(view.initial("c"), [root, msg(2, "e1"), msg(3, "e2"), msg(4, "e2")])
    assert ids(view.active_branch(state)) == ["e1", "e2", "e4"]  # implicit branch from e2
    state = view.fold(state, switch(5, "e3"))
    assert state.active_leaf == "e3" and ids(view.active_branch(state)) == ["e1", "e2", "e3"]
    assert ids(view.path_to_root(state, "e4")) == ["e1", "e2", "e4"]
    state = view.fold(state, msg(6, "e3"))
    assert ids(view.active_branch(state)) == ["e1", "e2", "e3", "e6"]


def test_node_at_seq_is_where_a_branch_or_fork_may_start() -> None:
    """The runner's, the CLI's and (by the same rule) the API's check of a branch or fork's seq."""
    state = view.fold_all(view.initial("c"), [msg(1, None), msg(2, "e1"), msg(3, "e2"), switch(4, "e2")])
    assert view.node_at_seq(state, 2).id == "e2" and view.node_at_seq(state, 3).id == "e3"
    for seq, words in [
        (0, "no event #0"),
        (5, "events #1 to #4: there is no event #5"),
        (4, "branch switch"),
    ]:
        with pytest.raises(UnknownEventError, match=words):
            view.node_at_seq(state, seq)
    # A view restored from a snapshot lacks the events off its stored path: refused with the reason.
    partial = state._replace(log=state.log.delete(2), events=state.events.delete("e3"))
    with pytest.raises(UnknownEventError, match="#3 is not in this view"):
        view.node_at_seq(partial, 3)


def test_errors_name_the_coordinates() -> None:
    state = view.fold(view.initial("c"), msg(1, None))
    with pytest.raises(SequenceGapError, match="conversation c: seq 3 after 1"):
        view.fold(state, msg(3, "e1"))
    with pytest.raises(ConversationMismatchError, match="belongs to conversation d, not c"):
        view.fold(state, msg(2, "e1", conversation_id="d"))
    with pytest.raises(UnknownEventError, match="parent_id=nope, which is never folded"):
        view.fold(state, msg(2, "nope"))
    with pytest.raises(UnknownEventError, match="leaf_event_id=e9"):
        view.fold(state, switch(2, "e9"))
    state = view.fold(state, switch(2, "e1"))
    with pytest.raises(UnknownEventError, match="not a tree node"):
        view.fold(state, msg(3, "e2"))
    with pytest.raises(UnknownEventError, match="no event zz"):
        view.path_to_root(state, "zz")


def test_duplicate_id_with_new_seq_changes_nothing() -> None:
    state = view.fold(view.initial("c"), msg(1, None))
    assert view.fold(state, msg(2, "e1", event_id="e1")) is state


def test_fork_is_a_root_even_with_a_foreign_parent() -> None:
    fork = ForkEvent(
        id="f1",
        conversation_id="c",
        tenant_id="t",
        seq=1,
        timestamp=T0,
        source="user",
        parent_id="other:7",
        source_conversation_id="other",
        source_event_id="other:7",
    )
    state = view.fold_all(view.initial("c"), [fork, msg(2, "f1")])
    assert ids(view.active_branch(state)) == ["f1", "e2"]
    assert list(state.forks) == [fork]


def test_fold_benchmark_100k_events() -> None:
    """Micro-benchmark (printed, not asserted on time): one conversation of 100k events."""
    n = 100_000
    events = [msg(i, f"e{i - 1}" if i > 1 else None) for i in range(1, n + 1)]
    # A condensation every 500 events forgets all but the root and the last 50 (its
    # predecessor's summary included), as a condenser that keeps the view bounded does.
    for i in range(500, n, 500):
        events[i - 1] = CondensationEvent(
            id=f"e{i}",
            conversation_id="c",
            tenant_id="t",
            seq=i,
            timestamp=T0 + timedelta(seconds=i),
            source="agent",
            parent_id=f"e{i - 1}",
            forgotten_event_ids=tuple(f"e{j}" for j in range(max(2, i - 550), i - 50)),
            summary=f"summary {i}",
        )
    started = time.perf_counter()
    state = view.initial("c")
    for event in events:
        state = view.fold(state, event)
    one_by_one = time.perf_counter() - started
    started = time.perf_counter()
    batched = view.fold_all(view.initial("c"), events)
    elapsed = time.perf_counter() - started
    branch_started = time.perf_counter()
    branch = view.active_branch(state)
    branch_ms = (time.perf_counter() - branch_started) * 1e3
    print(
        f"\nview, {n} events: fold {one_by_one / n * 1e6:.2f} us/event, "
        f"fold_all {elapsed / n * 1e6:.2f} us/event; active_branch ({len(branch)}) {branch_ms:.2f} ms"
    )
    assert batched == state and state.last_seq == n and len(state.path) == n
    assert len(branch) == 1 + 1 + 50 + (n - 99_500)  # root, summary, last 50, tail


@settings(max_examples=25)
@given(conversations(min_size=30, max_size=60))
def test_resume_from_log_equals_live_state(events: list[Event]) -> None:
    """Rebuilding from the state's own log (a snapshot) gives the same state."""
    state = build(events)
    assert build(list(state.log)) == state


@given(conversations())
def test_digest_equals_its_plain_definition(events: list[Event]) -> None:
    """`digest` (through `branch_digest`, which the views consumer feeds from a cached join)."""
    import hashlib

    for state in (view.initial(events[0].conversation_id), build(events)):
        ids = [e.id for e in state.visible]
        text = "\n".join((str(state.last_seq), state.active_leaf or "", *ids))
        assert view.digest(state) == hashlib.sha256(text.encode()).hexdigest()
