"""The codec's trusted construction equals `model_validate` for every record type, else validation runs."""

from __future__ import annotations

import copy
from io import BytesIO

import pytest
from fastavro import schemaless_reader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convdb.schemas import MessageEvent, SingleObjectCodec
from convdb.schemas._trusted import trusted_builder
from convdb.schemas.catalog import MODELS, shipped_catalog
from convdb.schemas.errors import InvalidRecordError
from tests.schemas.records import RECORD_STRATEGIES, sample_record

CODEC = SingleObjectCodec()
NAMES = sorted(MODELS)


def validated(data: bytes) -> object:
    """The reference decode: fastavro, then pydantic validation."""
    version = CODEC.catalog.by_fingerprint[data[2:10]]
    buf = BytesIO(data)
    buf.seek(10)
    return MODELS[version.name].model_validate(schemaless_reader(buf, version.parsed, None))


def as_json(model: object) -> str:
    """JSON text, or the error's type when pydantic cannot serialize (non-UTF-8 bytes)."""
    try:
        return model.model_dump_json()  # type: ignore[attr-defined, no-any-return]
    except ValueError as exc:
        return type(exc).__name__


def test_every_shipped_reader_schema_gets_a_trusted_builder() -> None:
    """Otherwise the sink silently falls back to validation for that type (correct, but slow)."""
    catalog = shipped_catalog()
    for name, version in catalog.latest.items():
        assert trusted_builder(MODELS[name], version.schema) is not None, name


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_trusted_decode_equals_the_validated_model(name: str, data: st.DataObject) -> None:
    record = data.draw(RECORD_STRATEGIES[name])
    wire = CODEC.encode(record)
    fast, slow = CODEC.decode(wire), validated(wire)
    assert type(fast) is type(slow) is type(record)
    assert fast == slow == record
    assert fast.model_dump() == slow.model_dump()
    assert as_json(fast) == as_json(slow)
    assert fast.model_fields_set == slow.model_fields_set
    assert hash(fast) == hash(slow)
    for field in type(record).model_fields:
        mine, theirs = getattr(fast, field), getattr(slow, field)
        assert type(mine) is type(theirs), field  # tuples stay tuples, datetimes stay datetimes
        if hasattr(mine, "utcoffset"):
            assert mine.utcoffset() == theirs.utcoffset() and mine.utcoffset() is not None


def test_a_wrong_kind_on_the_wire_is_still_refused() -> None:
    """`kind` is a plain Avro string, so only validation can refuse a foreign producer's value."""
    bad = MessageEvent.model_construct(**{**sample_record(MessageEvent).__dict__, "kind": "action"})
    with pytest.raises(InvalidRecordError, match="MessageEvent does not validate"):
        CODEC.decode(CODEC.encode(bad))


def test_mappings_avro_does_not_guarantee_are_validated() -> None:
    """A Literal carried as a plain string, or a field order that differs, gets no trusted builder."""
    schema = copy.deepcopy(shipped_catalog().latest["MessageEvent"].schema)
    role = next(f for f in schema["fields"] if f["name"] == "role")
    role["type"] = "string"
    assert trusted_builder(MessageEvent, schema) is None
    schema = copy.deepcopy(shipped_catalog().latest["MessageEvent"].schema)
    schema["fields"].reverse()
    assert trusted_builder(MessageEvent, schema) is None
