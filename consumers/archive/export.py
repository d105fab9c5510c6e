"""`convdb export`: one conversation's full trajectory, from Kafka or from the archive.

The trajectory is the conversation's events in log order (which is seq order; seq-0
annotations such as titles stay where they were logged), each event once. Both formats are
deterministic, so an export from the archive is byte-equal to the export from Kafka:
- jsonl: one JSON object per event, keys sorted;
- avro: an Avro container whose schema is the union of the event records (readable by any
  Avro tool), sync marker derived from the conversation id.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from io import BytesIO
from typing import Any, Literal

from fastavro import writer

from convdb.consumers.archive.container import RawRecord
from convdb.consumers.archive.reader import ArchiveReader
from convdb.consumers.archive.sources import Segment, Window, read_kafka
from convdb.infra.partitioner import partition_for
from convdb.infra.reader import partition_extents
from convdb.infra.settings import Settings
from convdb.schemas import EVENT_TYPES, Codec, Event
from convdb.schemas.catalog import shipped_catalog
from convdb.schemas.errors import SchemaError
from convdb.schemas.topics import EVENTS

logger = logging.getLogger(__name__)

Format = Literal["jsonl", "avro"]


@dataclass(frozen=True)
class Trajectory:
    """A conversation's events in order, plus how many of its records did not decode."""

    conversation_id: str
    events: tuple[Event, ...]
    offsets: tuple[int, ...]
    """Events-topic offset of each event (one partition per conversation)."""
    undecodable: int = 0


def from_records(conversation_id: str, records: Iterable[RawRecord], codec: Codec) -> Trajectory:
    """Decode a conversation's records (others are skipped), each event id once."""
    events: list[Event] = []
    offsets: list[int] = []
    seen: set[str] = set()
    bad = 0
    for rec in records:
        if rec.conversation_id != conversation_id:
            continue
        try:
            event = codec.decode(rec.value or b"", expect=EVENT_TYPES)
        except SchemaError as exc:
            logger.warning(
                "%s[%d]@%d: undecodable, not exported: %s", rec.topic, rec.partition, rec.offset, exc
            )
            bad += 1
            continue
        if event.id not in seen:
            seen.add(event.id)
            events.append(event)
            offsets.append(rec.offset)
    return Trajectory(conversation_id, tuple(events), tuple(offsets), bad)


def from_kafka(settings: Settings, conversation_id: str, codec: Codec) -> Trajectory:
    """The trajectory read from the conversation's partition of the events topic."""
    topic = EVENTS.name(settings.namespace)
    extents = partition_extents(settings, topic)
    p = partition_for(conversation_id, len(extents))
    low, high = extents[p]
    records = read_kafka(settings, [Segment(topic, p, "kafka", low, high)], Window())
    return from_records(conversation_id, records, codec)


def from_archive(settings: Settings, reader: ArchiveReader, conversation_id: str, codec: Codec) -> Trajectory:
    """The trajectory read from the archive objects whose index lists the conversation."""
    refs = reader.conversation_objects(EVENTS.name(settings.namespace), conversation_id, settings.partitions)
    return from_records(conversation_id, reader.read(refs), codec)


def to_jsonl(trajectory: Trajectory) -> bytes:
    """One JSON object per line, keys sorted."""
    lines = (
        json.dumps(e.model_dump(mode="json"), sort_keys=True, ensure_ascii=False) for e in trajectory.events
    )
    return "".join(line + "\n" for line in lines).encode()


def to_avro(trajectory: Trajectory) -> bytes:
    """An Avro container file of the events (schema: the union of every event record)."""
    buf = BytesIO()
    records = ((f"convdb.{type(e).__name__}", e.__dict__) for e in trajectory.events)
    sync = hashlib.sha256(trajectory.conversation_id.encode()).digest()[:16]
    meta = {"convdb.conversation_id": trajectory.conversation_id}
    writer(buf, _union_schema(), records, codec="deflate", metadata=meta, sync_marker=sync, strict=True)
    return buf.getvalue()


def render(trajectory: Trajectory, fmt: Format) -> bytes:
    """The trajectory in the requested format."""
    return to_jsonl(trajectory) if fmt == "jsonl" else to_avro(trajectory)


_UNION: Any = None


def _union_schema() -> Any:
    global _UNION  # noqa: PLW0603 - parsed once, immutable afterwards
    if _UNION is None:
        catalog = shipped_catalog()
        seen: set[str] = set()
        branches = [_dedup_named(catalog.latest[m.__name__].schema, seen, "convdb") for m in EVENT_TYPES]
        # Kept unparsed: fastavro embeds it as given, and parsed key order varies by process.
        _UNION = branches
    return _UNION


def _dedup_named(schema: Any, seen: set[str], namespace: str) -> Any:
    """The schema with every named type after its first definition replaced by its name."""
    if isinstance(schema, list):
        return [_dedup_named(s, seen, namespace) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("type") in ("record", "enum", "fixed"):
        ns = schema.get("namespace", namespace)
        full = schema["name"] if "." in schema["name"] else f"{ns}.{schema['name']}"
        if full in seen:
            return full
        seen.add(full)
        if schema["type"] == "record":
            fields = [{**f, "type": _dedup_named(f["type"], seen, ns)} for f in schema["fields"]]
            return {**schema, "fields": fields}
        return schema
    if schema.get("type") == "array":
        return {**schema, "items": _dedup_named(schema["items"], seen, namespace)}
    if schema.get("type") == "map":
        return {**schema, "values": _dedup_named(schema["values"], seen, namespace)}
    return schema
