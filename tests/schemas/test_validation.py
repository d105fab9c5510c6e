"""The identifier and text rules: entry-point checks, and the codec refusing records that break them."""

from __future__ import annotations

from io import BytesIO

import pytest
from fastavro import schemaless_writer
from hypothesis import given
from hypothesis import strategies as st

from convdb.schemas import InboxMessage, MessageEvent, SingleObjectCodec
from convdb.schemas._types import AvroModel
from convdb.schemas.catalog import shipped_catalog
from convdb.schemas.errors import InvalidRecordError, InvalidValueError
from convdb.schemas.validation import (
    MAX_ID,
    check_conversation_id,
    check_id,
    check_operation_id,
    check_text,
    clean_text,
    record_problem,
    shown,
)
from tests.helpers import now

CODEC = SingleObjectCodec()
HOSTILE_IDS = [
    "",
    "a\x00b",
    "a\nb",
    "tab\there",
    "\x1b[31m",
    "x" * (MAX_ID + 1),
    "bidi\u202eevil",
    "zw\u200bsp",
]


def foreign_bytes(record: AvroModel) -> bytes:
    """What a foreign producer (no convdb rules) writes: the shipped header and schema, any values."""
    version = shipped_catalog().latest[type(record).__name__]
    buf = BytesIO()
    buf.write(version.header)
    schemaless_writer(buf, version.parsed, record.__dict__)
    return buf.getvalue()


def message(**fields: object) -> MessageEvent:
    base: dict[str, object] = {
        "id": "e1", "conversation_id": "c1", "tenant_id": "acme", "seq": 1, "timestamp": now(),
        "source": "user", "role": "user", "content": "hello",
    }  # fmt: skip
    base.update(fields)
    return MessageEvent.model_construct(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", HOSTILE_IDS)
def test_identifiers_refuse_empty_long_and_unprintable(bad: str) -> None:
    with pytest.raises(InvalidValueError) as err:
        check_id(bad, "conversation_id")
    assert "conversation_id" in str(err.value) and len(str(err.value)) < 300


def test_conversation_ids_have_no_slash_and_operation_ids_two_parts() -> None:
    assert check_conversation_id("conv-1 é😀") == "conv-1 é😀"
    with pytest.raises(InvalidValueError, match="'/'"):
        check_conversation_id("a/b")
    assert check_operation_id("conv-1/act-1") == "conv-1/act-1"
    for bad in ("no-slash", "/act", "conv/", "c\x00/a"):
        with pytest.raises(InvalidValueError):
            check_operation_id(bad)


def test_texts_refuse_nul_and_surrogates_and_respect_a_limit() -> None:
    assert check_text("line\nnext\ttab \x1b[0m", "content") == "line\nnext\ttab \x1b[0m"
    for bad in ("a\x00b", "lone \ud800 surrogate"):
        with pytest.raises(InvalidValueError):
            check_text(bad, "content")
    with pytest.raises(InvalidValueError, match="at most 3"):
        check_text("abcd", "content", 3)
    assert clean_text("a\x00b\udc80c?") == "a\ufffdb\ufffdc?"


def test_error_messages_show_a_bounded_value() -> None:
    assert len(shown("x" * 100_000)) < 150 and "more characters" in shown("x" * 100_000)


@pytest.mark.parametrize(
    "fields",
    [
        {"conversation_id": "c\x00"},
        {"conversation_id": "a/b"},
        {"tenant_id": "t" * (MAX_ID + 1)},
        {"id": ""},
        {"parent_id": "p\n"},
        {"content": "nul \x00 inside"},
    ],
)
def test_the_codec_refuses_to_write_and_to_read_a_record_that_breaks_the_rules(fields: dict) -> None:
    record = message(**fields)
    assert record_problem(record) is not None
    with pytest.raises(InvalidRecordError):
        CODEC.encode(record)
    with pytest.raises(InvalidRecordError) as err:
        CODEC.decode(foreign_bytes(record))  # an older or foreign producer wrote it
    assert next(iter(fields)) in str(err.value)


def test_tuples_of_ids_and_optional_operation_ids_are_checked() -> None:
    inbox = InboxMessage(
        id="i1",
        conversation_id="c1",
        tenant_id="acme",
        timestamp=now(),
        command="resolve",
        operation_id="c1/a1",
    )
    assert record_problem(inbox) is None
    broken = inbox.model_copy(update={"operation_id": "c1/\x07"})
    assert "operation_id" in (record_problem(broken) or "")


@given(st.text(max_size=30))
def test_clean_text_always_gives_a_valid_text(text: str) -> None:
    check_text(clean_text(text))
