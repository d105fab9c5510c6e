"""The small per-object index: which conversations an object holds and its time range.

Written as a sidecar ``.idx.json`` beside each object (a conversation list does not fit S3's
2 KB user-metadata limit); the counts and time range are also put in the object's user
metadata. A reader finds a conversation's objects by computing its partition (the producer's
murmur2 partitioner) and reading only that partition's sidecars, never the data objects of
other conversations or other partitions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from convdb.consumers.archive.container import RawRecord
from convdb.consumers.archive.errors import CorruptArchiveError

METADATA_LIMIT = 1500
"""Bytes of S3 user metadata we allow ourselves (the hard limit is 2 KB for all of it)."""


@dataclass(frozen=True)
class ObjectIndex:
    """What one archive object holds."""

    topic: str
    partition: int
    start: int
    end: int
    records: int
    value_bytes: int
    min_ts_ms: int
    max_ts_ms: int
    conversations: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """conversation_id -> (record count, first offset, last offset)."""

    @classmethod
    def build(cls, records: Sequence[RawRecord]) -> ObjectIndex:
        """Index a non-empty batch of records of one topic-partition."""
        convs: dict[str, list[int]] = {}
        for r in records:
            entry = convs.get(r.conversation_id)
            if entry is None:
                convs[r.conversation_id] = [1, r.offset, r.offset]
            else:
                entry[0] += 1
                entry[2] = r.offset
        first = records[0]
        return cls(
            topic=first.topic,
            partition=first.partition,
            start=first.offset,
            end=records[-1].offset,
            records=len(records),
            value_bytes=sum(len(r.value or b"") for r in records),
            min_ts_ms=min(r.timestamp_ms for r in records),
            max_ts_ms=max(r.timestamp_ms for r in records),
            conversations={k: (v[0], v[1], v[2]) for k, v in sorted(convs.items())},
        )

    def to_json(self) -> bytes:
        """Deterministic JSON bytes (sorted keys)."""
        body = {
            "topic": self.topic,
            "partition": self.partition,
            "start": self.start,
            "end": self.end,
            "records": self.records,
            "value_bytes": self.value_bytes,
            "min_ts_ms": self.min_ts_ms,
            "max_ts_ms": self.max_ts_ms,
            "conversations": {k: list(v) for k, v in self.conversations.items()},
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, what: str) -> ObjectIndex:
        """Parse a sidecar. Raises `CorruptArchiveError`."""
        try:
            body: dict[str, Any] = json.loads(data)
            convs = {k: (int(v[0]), int(v[1]), int(v[2])) for k, v in body.pop("conversations").items()}
            return cls(**body, conversations=convs)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise CorruptArchiveError(f"{what}: unreadable index: {exc}") from exc

    def metadata(self) -> dict[str, str]:
        """S3 user metadata: counts and time range, plus the conversations when they fit."""
        meta = {
            "records": str(self.records),
            "start-offset": str(self.start),
            "end-offset": str(self.end),
            "min-ts-ms": str(self.min_ts_ms),
            "max-ts-ms": str(self.max_ts_ms),
            "conversation-count": str(len(self.conversations)),
        }
        listed = ",".join(self.conversations)
        # Keys are whatever a producer wrote: only printable ASCII without commas may go into an
        # HTTP header (a NUL or a newline makes the upload fail, again after every restart).
        plain = listed.isascii() and listed.isprintable() and listed.count(",") == len(self.conversations) - 1
        if plain and len(listed) + sum(len(k) + len(v) for k, v in meta.items()) < METADATA_LIMIT:
            meta["conversations"] = listed
        return meta

    def may_hold_from(self, from_ms: int) -> bool:
        """False when no record here can have an event time at or after `from_ms`.

        Events are stamped before they are produced, so event time <= Kafka timestamp: an
        object whose newest Kafka timestamp is older than `from_ms` holds no such event.
        """
        return self.max_ts_ms >= from_ms
