"""Helpers the projectors share: time columns and event payloads.

Payload columns hold an event's Avro single-object encoding (the bytes it arrived in, when
the topic uses that framing): no serialization on the write path, about half the bytes of
JSON, and any shipped schema version still reads (the writer's fingerprint is in the bytes).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from convdb.schemas import AvroModel, SingleObjectCodec
from convdb.schemas.errors import InvalidRecordError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CODEC = SingleObjectCodec()


def micros(value: datetime) -> int:
    """Microseconds since the epoch: the integer form every time column uses (exact, portable)."""
    delta = value - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    """The UTC datetime of a `micros` value."""
    return datetime.fromtimestamp(value // 1_000_000, UTC).replace(microsecond=value % 1_000_000)


def payload_of(record: AvroModel) -> bytes:
    """The payload column value of a record."""
    return _CODEC.encode(record)


def event_from_payload(data: bytes | memoryview) -> Any:
    """The event model of a payload column."""
    return _CODEC.decode(bytes(data))


def payload_json(data: bytes | memoryview) -> str:
    """A payload as the event's JSON text (`model_dump_json()`), for query results."""
    event = event_from_payload(data)
    return str(event.__pydantic_serializer__.to_json(event).decode())


def key_of(key: bytes | None, conversation_id: str) -> str:
    """The record's key as text; it must be its conversation id (else another partition holds the rest).

    Raises:
        InvalidRecordError: the key is another (the live runner and replay both refuse it).
    """
    text = key.decode(errors="replace") if key else ""
    if text != conversation_id:
        raise InvalidRecordError(
            f"key {text[:80]!r} is not the record's conversation_id {conversation_id[:80]!r}"
        )
    return text
