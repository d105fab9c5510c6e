"""The sink's shared per-batch work: each shortcut gives what the plain computation gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from convdb.consumers._apply import records_for
from convdb.consumers._rows import event_from_payload, payload_json
from convdb.consumers.base import Batch, ConsumedRecord, Fold, fold_records
from convdb.projections import stats, view
from convdb.projections.errors import ProjectionError
from convdb.schemas import SingleObjectCodec
from convdb.schemas.events import EVENT_TYPES, Event
from convdb.schemas.records import Receipt
from tests.consumers.builders import interleaved
from tests.schemas.records import RECORD_STRATEGIES, sample_record
from tests.strategies import conversations, interleaved_conversations, with_redeliveries

any_event = st.one_of([RECORD_STRATEGIES[m.__name__] for m in EVENT_TYPES])


def records_of(values: list, topic: str = "ev", partition: int = 0, start: int = 0) -> list[ConsumedRecord]:
    return [ConsumedRecord(topic, partition, start + i, 0, "k", v) for i, v in enumerate(values)]


@settings(max_examples=300, deadline=None)
@given(any_event)
def test_payload_is_the_event_and_its_json_is_model_dump_json(event: Event) -> None:
    """A payload decodes to the event, and query results give `model_dump_json()`'s text of it."""
    batch = Batch(records_of([event]))
    record = batch[0]
    assert event_from_payload(batch.payload(record)) == event
    assert batch.payload(record) is batch.payload(record)  # encoded once per batch
    assert payload_json(batch.payload(record)) == event.model_dump_json()
    arrived = ConsumedRecord("ev", 0, 0, 0, "k", event, SingleObjectCodec().encode(event))
    assert Batch([arrived]).payload(arrived) is arrived.data  # the bytes it arrived in, as they are


@given(interleaved_conversations())
def test_grouping_is_shared_per_batch_only(events: list[Event]) -> None:
    records = records_of(events)
    plain: dict[str, list[ConsumedRecord]] = {}
    for r in records:
        plain.setdefault(r.value.conversation_id, []).append(r)  # type: ignore[attr-defined]
    batch = Batch(records)
    first = batch.by_conversation()
    assert first == plain
    assert batch.by_conversation() is first  # the same batch: shared, not regrouped
    copy = Batch(list(records))
    assert copy.by_conversation() == plain and copy.by_conversation() is not first
    grown = batch.keep([*records, records[0]])  # another batch is grouped again
    conv = records[0].value.conversation_id  # type: ignore[attr-defined]
    assert len(grown.by_conversation()[conv]) == len(plain[conv]) + 1


def test_events_only_keeps_the_batch_when_every_record_is_an_event() -> None:
    records = records_of(interleaved(2, 5))
    batch = Batch(records)
    assert batch.events() is batch
    mixed = Batch([*records, *records_of([sample_record(Receipt)], start=10)])
    assert list(mixed.events()) == records


def _one_by_one(projection: Fold, conv: str, records: list[ConsumedRecord]) -> tuple[object, list, list]:
    """The plain computation: fold record by record, skipping (and listing) what is refused."""
    state, folded, refused = projection.initial(conv), [], []
    for record in records:
        try:
            state = projection.fold(state, record.value)
        except ProjectionError:
            refused.append(record)
            continue
        folded.append(record)
    return state, folded, refused


@given(conversations(), st.data())
def test_fold_records_equals_folding_one_by_one(events: list[Event], data: st.DataObject) -> None:
    """Batched folds with record-by-record fallback: same state, same folded and refused records."""
    log = data.draw(with_redeliveries(events))
    if data.draw(st.booleans()) and len(log) > 2:
        log = [e for e in log if e.seq != log[len(log) // 2].seq]  # a gap: some records refused
    records = records_of(log)
    conv = events[0].conversation_id
    for projection in (
        Fold(view.initial, view.fold, view.fold_all),
        Fold(stats.initial, stats.fold, stats.fold_all),
    ):
        refused_a: list = []
        state_a, folded_a = fold_records(projection, projection.initial(conv), records, refused_a)
        state_b, folded_b, refused_b = _one_by_one(projection, conv, records)
        assert state_a == state_b
        assert list(folded_a) == folded_b
        assert [r.record for r in refused_a] == refused_b


def test_each_projector_gets_the_records_at_or_after_its_stored_offsets() -> None:
    batch = Batch(
        records_of(interleaved(1, 4), partition=0, start=10)
        + records_of(interleaved(1, 4), partition=1, start=20)
    )
    starts = {("ev", 0): 10, ("ev", 1): 20}
    fresh = {("views", "ev", 0): -1, ("views", "ev", 1): 20}
    assert records_for("views", batch, starts, fresh) is batch  # nothing to skip: the same batch
    ahead = {("views", "ev", 0): 12, ("views", "ev", 1): 20}
    assert [(r.partition, r.offset) for r in records_for("views", batch, starts, ahead)] == [
        (0, 12), (0, 13), (1, 20), (1, 21), (1, 22), (1, 23)
    ]  # fmt: skip
    only_one = {("views", "ev", 1): 22}
    assert [r.offset for r in records_for("views", batch, starts, only_one)] == [22, 23]
