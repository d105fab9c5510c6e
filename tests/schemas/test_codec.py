"""The codec: every record type round-trips (in memory and through the broker); bad bytes get named errors."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convdb.infra.kafka import make_producer
from convdb.infra.settings import Settings
from convdb.schemas import (
    ActionEvent,
    ConfluentCodec,
    EffectProposed,
    MessageEvent,
    ObservationEvent,
    SingleObjectCodec,
    make_codec,
)
from convdb.schemas._types import AvroModel
from convdb.schemas.catalog import MODELS, shipped_catalog
from convdb.schemas.errors import (
    CorruptRecordError,
    InvalidRecordError,
    NotAvroError,
    SchemaError,
    TruncatedRecordError,
    UnexpectedRecordError,
    UnknownFingerprintError,
)
from convdb.schemas.topics import ALL_TOPICS, DLQ, EFFECTS, EVENTS, Topic
from tests.helpers import read_topic
from tests.schemas.records import RECORD_STRATEGIES, any_record, sample_record

CODEC = SingleObjectCodec()
NAMES = sorted(MODELS)


def topic_of(model: type[AvroModel]) -> Topic:
    """The registry topic that carries this record type."""
    return next(t for t in ALL_TOPICS if t is not DLQ and model in t.value_types)


def test_every_record_type_has_a_strategy_and_a_topic() -> None:
    assert set(RECORD_STRATEGIES) == set(MODELS)
    assert set(MODELS) == set(shipped_catalog().latest)  # one model per shipped record schema, no more
    for model in MODELS.values():
        assert topic_of(model).value_types  # no record type is homeless


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_model_bytes_model(name: str, data: st.DataObject) -> None:
    record = data.draw(RECORD_STRATEGIES[name])
    decoded = CODEC.decode(CODEC.encode(record), expect=(type(record),))
    assert type(decoded) is type(record)
    assert decoded == record


@settings(max_examples=200, deadline=None)
@given(record=any_record)
def test_encoding_is_deterministic_and_starts_with_the_latest_fingerprint(record: AvroModel) -> None:
    data = CODEC.encode(record)
    assert data == CODEC.encode(record)
    assert data.startswith(shipped_catalog().latest[type(record).__name__].header)


@pytest.mark.kafka
def test_every_record_type_round_trips_through_the_broker(settings: Settings) -> None:
    records = [sample_record(MODELS[name]) for name in NAMES]
    producer = make_producer(settings)
    per_topic: dict[str, list[AvroModel]] = {}
    for record in records:
        topic = topic_of(type(record)).name(settings.namespace)
        per_topic.setdefault(topic, []).append(record)
        key = record.conversation_id  # type: ignore[attr-defined]
        producer.produce(topic, CODEC.encode(record), key)
    assert producer.flush(30) == 0
    for topic, sent in per_topic.items():
        suffix = topic.removeprefix(settings.namespace + ".")
        allowed = next(t for t in ALL_TOPICS if t.suffix == suffix).value_types
        got = [
            CODEC.decode(value, expect=allowed)
            for _p, _o, _k, value in read_topic(settings, topic, len(sent))
        ]
        assert sorted(got, key=repr) == sorted(sent, key=repr), topic


# --- bad input: each failure has its own named error and a message that says what is wrong ---


def _message() -> MessageEvent:
    return sample_record(MessageEvent)  # type: ignore[return-value]


@pytest.mark.parametrize(
    "data",
    [b"", b"garbage", b"\x00\x00\x00\x00\x01hello", b'{"kind": "message"}', b"\xc3\x01short"],
)
def test_garbage_bytes_raise_not_avro(data: bytes) -> None:
    with pytest.raises(NotAvroError, match="not Avro single-object encoded") as info:
        CODEC.decode(data)
    assert f"{len(data)} bytes" in str(info.value)


def test_unknown_fingerprint_names_the_fingerprint() -> None:
    data = b"\xc3\x01" + struct.pack("<q", 0x1234_5678_9ABC) + b"\x02x"
    with pytest.raises(UnknownFingerprintError, match="unknown schema fingerprint bc9a78563412"):
        CODEC.decode(data)


@pytest.mark.parametrize("cut", [1, 2, 11, 40])
def test_truncated_record(cut: int) -> None:
    data = CODEC.encode(_message())
    with pytest.raises(TruncatedRecordError, match="MessageEvent v2: payload ends early") as info:
        CODEC.decode(data[:-cut])
    assert isinstance(info.value.__cause__, EOFError)


def test_trailing_bytes_are_corrupt() -> None:
    data = CODEC.encode(_message()) + b"\x00\x01"
    with pytest.raises(CorruptRecordError, match="2 bytes left after the record"):
        CODEC.decode(data)


def test_bad_enum_index_is_corrupt() -> None:
    record = _message()
    user = CODEC.encode(record.model_copy(update={"source": "user"}))
    hook = bytearray(CODEC.encode(record.model_copy(update={"source": "hook"})))
    # The two encodings differ only in the enum index byte of `source`.
    (at,) = [i for i, (a, b) in enumerate(zip(user, hook, strict=True)) if a != b]
    hook[at] = 0x7E  # zig-zag 63: no such symbol
    with pytest.raises(CorruptRecordError, match="MessageEvent v2: payload does not decode"):
        CODEC.decode(bytes(hook))


def test_wrong_record_type_for_the_topic() -> None:
    data = CODEC.encode(sample_record(EffectProposed))
    with pytest.raises(UnexpectedRecordError, match="got a EffectProposed where only SystemPromptEvent"):
        CODEC.decode(data, expect=EVENTS.value_types)
    assert type(CODEC.decode(data, expect=EFFECTS.value_types)) is EffectProposed


def test_invalid_model_is_refused_at_encode() -> None:
    bad = ActionEvent.model_construct(**{**sample_record(ActionEvent).__dict__, "seq": "seven"})
    with pytest.raises(InvalidRecordError, match="cannot encode ActionEvent"):
        CODEC.encode(bad)


@settings(max_examples=300, deadline=None)
@given(record=any_record, noise=st.binary(max_size=64), cut=st.integers(0, 64))
def test_mangled_payloads_only_ever_raise_schema_errors(record: AvroModel, noise: bytes, cut: int) -> None:
    data = CODEC.encode(record)
    mangled = data[:10] + noise + data[10 + cut :]
    try:
        CODEC.decode(mangled)
    except SchemaError as exc:
        assert str(exc)  # a message, never an empty or bare fastavro error


# --- Confluent framing through confluent-kafka's in-memory mock:// registry (the one allowed fake) ---


@pytest.fixture
def confluent() -> ConfluentCodec:
    codec = make_codec(f"mock://{uuid.uuid4().hex}")
    assert isinstance(codec, ConfluentCodec)
    return codec


@pytest.mark.parametrize("name", NAMES)
def test_confluent_round_trip(confluent: ConfluentCodec, name: str) -> None:
    record = sample_record(MODELS[name])
    data = confluent.encode(record)
    assert data[:1] == b"\x00"
    assert confluent.decode(data, expect=(type(record),)) == record


def test_confluent_registers_each_schema_once(confluent: ConfluentCodec) -> None:
    a = confluent.encode(sample_record(ObservationEvent))
    b = confluent.encode(sample_record(ObservationEvent))
    c = confluent.encode(sample_record(MessageEvent))
    assert a[:5] == b[:5] != c[:5]


def test_confluent_unknown_schema_id(confluent: ConfluentCodec) -> None:
    data = b"\x00" + (4242).to_bytes(4, "big") + b"\x02x"
    with pytest.raises(UnknownFingerprintError, match="schema id 4242 is not in the registry"):
        confluent.decode(data)


def test_confluent_garbage_truncated_and_wrong_type(confluent: ConfluentCodec) -> None:
    with pytest.raises(NotAvroError, match="not Confluent-framed Avro"):
        confluent.decode(b"\xc3\x01" + b"\x00" * 12)
    data = confluent.encode(_message())
    with pytest.raises(TruncatedRecordError, match="payload ends early"):
        confluent.decode(data[:-3])
    with pytest.raises(CorruptRecordError, match="bytes left after the record"):
        confluent.decode(data + b"\x00")
    with pytest.raises(UnexpectedRecordError, match="got a MessageEvent"):
        confluent.decode(data, expect=EFFECTS.value_types)
