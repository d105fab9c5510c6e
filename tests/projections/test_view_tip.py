"""The view tip: extending it by a run equals the tip of the full fold, whenever it extends at all."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from convdb.projections import view
from convdb.projections.view_tip import Tip, extend_tip, tip
from convdb.schemas.events import Event, MessageEvent
from tests.strategies import T0, batch_splits, conversations, split, with_redeliveries


@given(conversations(), st.data())
def test_an_extended_tip_is_the_tip_of_the_full_fold(events: list[Event], data: st.DataObject) -> None:
    """Any batch split, redeliveries included: each batch extends the tip exactly, or declines."""
    log = data.draw(with_redeliveries(events))
    state = view.initial(log[0].conversation_id)
    for batch in split(log, data.draw(batch_splits(len(log)))):
        extended = extend_tip(tip(state), batch)
        after = view.fold_all(state, batch)
        if extended is not None and not any(e.id in state.events for e in batch):  # the precondition
            assert extended == tip(after)
        state = after


@given(conversations(), st.data())
def test_a_run_of_plain_tail_appends_always_extends(events: list[Event], data: st.DataObject) -> None:
    """The common case takes the short way: the next seq on the active leaf, nothing else."""
    state = view.fold_all(view.initial(events[0].conversation_id), events)
    count = data.draw(st.integers(1, 20))
    run, leaf = [], state.active_leaf
    for i in range(count):
        seq = state.last_seq + 1 + i
        event = MessageEvent(
            id=f"tail-{seq}", conversation_id=state.conversation_id, tenant_id="tenant-a", seq=seq,
            timestamp=T0, source="agent", parent_id=leaf, role="assistant", content="more",
        )  # fmt: skip
        run.append(event)
        leaf = event.id
    assert extend_tip(tip(state), run) == tip(view.fold_all(state, run))
    empty = view.initial("fresh")
    first = run[0].model_copy(update={"conversation_id": "fresh", "seq": 1, "parent_id": None})
    assert extend_tip(tip(empty), [first]) == tip(view.fold_all(empty, [first]))  # the first root


def test_branch_operations_and_foreign_events_decline() -> None:
    start = Tip("c", "t", 2, 2, "e2", 2)
    base = {"tenant_id": "t", "timestamp": T0, "source": "agent", "role": "user", "content": "x"}
    root = MessageEvent(id="r", conversation_id="c", seq=3, parent_id=None, **base)  # a second root
    off_leaf = MessageEvent(id="o", conversation_id="c", seq=3, parent_id="e1", **base)
    gap = MessageEvent(id="g", conversation_id="c", seq=4, parent_id="e2", **base)
    other = MessageEvent(id="x", conversation_id="d", seq=3, parent_id="e2", **base)
    good = MessageEvent(id="n", conversation_id="c", seq=3, parent_id="e2", **base)
    retried = MessageEvent(id="e2", conversation_id="c", seq=3, parent_id="e2", **base)  # the leaf's id
    for run in ([root], [off_leaf], [gap], [other], [good, good], [retried]):
        assert extend_tip(start, run) is None
    assert extend_tip(start, [good]) == Tip("c", "t", 3, 3, "n", 3)
