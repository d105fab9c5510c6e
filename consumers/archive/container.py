"""The archive object format: an Avro object container file of `ArchivedRecord`s.

One record schema for every topic: the Kafka coordinates plus the original key, value bytes
(still single-object or Confluent framed) and headers. This keeps the archive byte-exact
(replay decodes values with the normal codec, so schema evolution works exactly as on Kafka)
and lets one format serve the events, ledger, inbox and DLQ topics alike. The sink never
decodes values: the index needs only the key (the conversation id) and the Kafka timestamp.

Objects are written deterministically (a sync marker derived from the key, sorted metadata),
so a re-upload after a crash produces the same bytes under the same key.

fastavro's container API lives here, not in `schemas/codec.py`: the codec frames single
records, this module frames files of already-encoded records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from io import BytesIO
from typing import Any, NamedTuple

from fastavro import reader, writer

from convdb.consumers.archive.errors import CorruptArchiveError

ARCHIVED_RECORD_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "ArchivedRecord",
    "namespace": "convdb.archive",
    "doc": "One Kafka record, byte-exact, with its coordinates.",
    "fields": [
        {"name": "topic", "type": "string", "doc": "Full topic name."},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "timestamp_ms", "type": "long", "doc": "Kafka record timestamp (ms since epoch)."},
        {"name": "key", "type": ["null", "bytes"], "default": None},
        {"name": "value", "type": ["null", "bytes"], "default": None, "doc": "Original value bytes."},
        {
            "name": "headers",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "ArchivedHeader",
                    "fields": [
                        {"name": "key", "type": "string"},
                        {"name": "value", "type": ["null", "bytes"], "default": None},
                    ],
                },
            },
            "default": [],
        },
    ],
}
CODEC = "deflate"


class RawRecord(NamedTuple):
    """One Kafka record as bytes, from Kafka or from the archive.

    A NamedTuple, as `ConsumedRecord`: one is built per record a replay reads, and a frozen
    dataclass's `__init__` (an `object.__setattr__` per field) cost 1.2 us against 0.35.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def conversation_id(self) -> str:
        """The Kafka key as text: the conversation id on every convdb topic."""
        return (self.key or b"").decode(errors="replace")


def _to_dict(record: RawRecord) -> dict[str, Any]:
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp_ms": record.timestamp_ms,
        "key": record.key,
        "value": record.value,
        "headers": [{"key": k, "value": v} for k, v in record.headers],
    }


def write_container(key: str, records: Sequence[RawRecord], metadata: dict[str, str]) -> bytes:
    """Encode records as one Avro container file; equal inputs give equal bytes."""
    buf = BytesIO()
    sync = hashlib.sha256(key.encode()).digest()[:16]
    writer(
        buf,
        # The unparsed schema: fastavro embeds the dict it is given as JSON, and a parsed
        # schema's key order varies between processes (hash seeds), which breaks determinism.
        ARCHIVED_RECORD_SCHEMA,
        (_to_dict(r) for r in records),
        codec=CODEC,
        metadata=dict(sorted(metadata.items())),
        sync_marker=sync,
        sync_interval=1024 * 1024,
        strict=True,
    )
    return buf.getvalue()


def read_container(data: bytes, what: str) -> Iterator[RawRecord]:
    """Decode an archive object's records in offset order.

    Raises:
        CorruptArchiveError: the bytes are not an Avro container of `ArchivedRecord`.
    """
    try:
        for rec in reader(BytesIO(data)):
            if not isinstance(rec, dict):
                raise TypeError(f"a {type(rec).__name__} where an ArchivedRecord was expected")
            yield RawRecord(
                rec["topic"],
                rec["partition"],
                rec["offset"],
                rec["timestamp_ms"],
                rec["key"],
                rec["value"],
                tuple((h["key"], h["value"]) for h in rec["headers"]),
            )
    except (ValueError, TypeError, KeyError, EOFError, OSError) as exc:
        raise CorruptArchiveError(f"{what}: not a readable archive object: {exc}") from exc


def container_metadata(data: bytes, what: str) -> dict[str, str]:
    """The user metadata stored in an object's container header."""
    try:
        meta = reader(BytesIO(data)).metadata
    except (ValueError, TypeError, EOFError, OSError) as exc:
        raise CorruptArchiveError(f"{what}: not a readable archive object: {exc}") from exc
    return {k: v for k, v in meta.items() if not k.startswith("avro.")}
