"""The sink's shared per-batch helpers: each shortcut gives what the plain computation gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from consumers._rows import by_conversation, event_json, events_only, fold_batch, fold_checked
from consumers.base import ConsumedRecord
from consumers.runner import _records_for
from projections import stats, view
from schemas.events import EVENT_TYPES, Event
from schemas.records import Receipt
from tests.consumers.builders import interleaved
from tests.schemas.records import RECORD_STRATEGIES, sample_record
from tests.strategies import conversations, interleaved_conversations, with_redeliveries

any_event = st.one_of([RECORD_STRATEGIES[m.__name__] for m in EVENT_TYPES])


def records_of(values: list, topic: str = "ev", partition: int = 0, start: int = 0) -> list[ConsumedRecord]:
    return [ConsumedRecord(topic, partition, start + i, 0, "k", v) for i, v in enumerate(values)]


@settings(max_examples=300, deadline=None)
@given(any_event)
def test_event_json_is_model_dump_json(event: Event) -> None:
    """The payload text comes from the serializer directly; it must be `model_dump_json()`'s text."""
    assert event_json(event) == event.model_dump_json()
    assert event_json(event) == event.model_dump_json()  # memoized: same answer


@given(interleaved_conversations())
def test_grouping_is_memoized_per_batch_list_only(events: list[Event]) -> None:
    records = records_of(events)
    plain: dict[str, list[ConsumedRecord]] = {}
    for r in records:
        plain.setdefault(r.value.conversation_id, []).append(r)  # type: ignore[attr-defined]
    first = by_conversation(records)
    assert first == plain
    assert by_conversation(records) is first  # the same batch list: shared, not regrouped
    copy = list(records)
    assert by_conversation(copy) == plain and by_conversation(copy) is not first
    records.append(records[0])  # a changed list is grouped again
    assert (
        len(by_conversation(records)[records[0].value.conversation_id])
        == len(  # type: ignore[attr-defined]
            plain[records[0].value.conversation_id]  # type: ignore[attr-defined]
        )
        + 1
    )


def test_events_only_keeps_the_list_when_every_record_is_an_event() -> None:
    records = records_of(interleaved(2, 5))
    assert events_only(records) is records
    mixed = [*records, *records_of([sample_record(Receipt)], start=10)]
    assert events_only(mixed) == records


@given(conversations(), st.data())
def test_fold_batch_equals_fold_checked(events: list[Event], data: st.DataObject) -> None:
    """Batched folds with record-by-record fallback: same state, same folded and refused records."""
    log = data.draw(with_redeliveries(events))
    if data.draw(st.booleans()) and len(log) > 2:
        log = [e for e in log if e.seq != log[len(log) // 2].seq]  # a gap: some records refused
    records = records_of(log)
    conv = events[0].conversation_id
    for fold_all, fold, initial in (
        (view.fold_all, view.fold, view.initial),
        (stats.fold_all, stats.fold, stats.initial),
    ):
        refused_a: list = []
        refused_b: list = []
        state_a, folded_a = fold_batch(fold_all, fold, initial(conv), records, refused_a)
        state_b, folded_b = fold_checked(fold, initial(conv), records, refused_b)
        assert state_a == state_b
        assert list(folded_a) == folded_b
        assert [r for r, _ in refused_a] == [r for r, _ in refused_b]


def test_each_projector_gets_the_records_at_or_after_its_stored_offsets() -> None:
    records = records_of(interleaved(1, 4), partition=0, start=10) + records_of(
        interleaved(1, 4), partition=1, start=20
    )
    starts = {("ev", 0): 10, ("ev", 1): 20}
    fresh = {("views", "ev", 0): -1, ("views", "ev", 1): 20}
    assert _records_for("views", records, starts, fresh) is records  # nothing to skip: the same list
    ahead = {("views", "ev", 0): 12, ("views", "ev", 1): 20}
    assert [(r.partition, r.offset) for r in _records_for("views", records, starts, ahead)] == [
        (0, 12), (0, 13), (1, 20), (1, 21), (1, 22), (1, 23)
    ]  # fmt: skip
    only_one = {("views", "ev", 1): 22}
    assert [r.offset for r in _records_for("views", records, starts, only_one)] == [22, 23]
