"""Restore one partition's conversations: snapshots (local store, else the state topic), then tails.

1. Snapshots: the local store, plus every state-topic record after its checkpoint (the embedded
   broker does not compact, so without a local store the whole state partition is read; only the
   newest record per conversation is decoded).
2. The newest snapshot of the partition says from which events/effects offsets a restore must
   read so that every event no snapshot covers is seen. Both partitions are read from there to
   the end the fetch reports (never ListOffsets).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message, TopicPartition

from infra.reader import read_to_end
from infra.settings import Settings
from producers.fleet.store import SnapshotStore
from schemas import Codec, Snapshot
from schemas.topics import EFFECTS, EVENTS, STATE

logger = logging.getLogger(__name__)


@dataclass
class PartitionTail:
    """What a restore read for one partition."""

    partition: int
    snapshots: dict[str, Snapshot] = field(default_factory=dict)
    events: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    """conversation_id -> (offset, encoded event) after its snapshot, in log order."""
    ledger: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    state_read: int = 0
    events_read: int = 0
    effects_read: int = 0
    events_end: int = 0
    effects_end: int = 0
    source: str = "none"
    seconds: float = 0.0


# An empty fetch at a partition's end is held this long: restore reads several partitions to
# their end on the critical path of a takeover. Snapshots with a view can be large.
_READ: dict[str, Any] = {"fetch.wait.max.ms": 20, "receive.message.max.bytes": 200_000_000}


def _read(
    settings: Settings, starts: list[TopicPartition]
) -> tuple[dict[str, list[Message]], dict[str, int]]:
    """Records of each topic-partition from its start to the end the fetch reports, and that end."""
    found = read_to_end(settings, starts, purpose="restore", **_READ)
    return {t: read.records for (t, _), read in found.items()}, {
        t: read.end for (t, _), read in found.items()
    }


def _snapshots(
    settings: Settings, codec: Codec, store: SnapshotStore, partition: int, tail: PartitionTail
) -> Snapshot | None:
    """Fill `tail.snapshots`; returns the partition's newest snapshot (its offsets are the partition's)."""
    stored = store.load(partition)
    topic = STATE.name(settings.namespace)
    found, ends = _read(settings, [TopicPartition(topic, partition, stored.next_offset)])
    newest: dict[str, tuple[int, bytes]] = dict(stored.snapshots)
    for msg in found[topic]:
        key = (msg.key() or b"").decode(errors="replace")
        newest[key] = (msg.offset(), msg.value() or b"")
    tail.state_read = len(found[topic])
    tail.source = "changelog" if found[topic] else ("local" if stored.snapshots else "none")
    for cid, (_, data) in newest.items():
        tail.snapshots[cid] = codec.decode(data, expect=(Snapshot,))  # type: ignore[assignment]
    if found[topic]:
        store.save(partition, [(k, newest[k][0], newest[k][1]) for k in newest], ends[topic])
    if not newest:
        return None
    return tail.snapshots[max(newest, key=lambda cid: newest[cid][0])]


def restore_partition(
    settings: Settings, codec: Codec, store: SnapshotStore, partition: int
) -> PartitionTail:
    """Snapshots and uncovered tails of every conversation of one partition."""
    started = time.perf_counter()
    tail = PartitionTail(partition)
    newest = _snapshots(settings, codec, store, partition, tail)
    events_from = max(newest.partition_events_offset, 0) if newest else 0
    effects_from = max(newest.partition_effects_offset, 0) if newest else 0
    for snap in tail.snapshots.values():
        if not snap.view_complete:
            events_from = min(events_from, max(snap.first_events_offset, 0))
    events, effects = EVENTS.name(settings.namespace), EFFECTS.name(settings.namespace)
    found, ends = _read(
        settings,
        [TopicPartition(events, partition, events_from), TopicPartition(effects, partition, effects_from)],
    )
    tail.events_read, tail.effects_read = len(found[events]), len(found[effects])
    tail.events_end, tail.effects_end = ends[events], ends[effects]
    for msg in found[events]:
        cid = (msg.key() or b"").decode(errors="replace")
        snap = tail.snapshots.get(cid)
        floor = (
            -1 if snap is None else (snap.events_offset if snap.view_complete else snap.first_events_offset)
        )
        if msg.offset() >= floor:
            tail.events.setdefault(cid, []).append((msg.offset(), msg.value() or b""))
    for msg in found[effects]:
        cid = (msg.key() or b"").decode(errors="replace")
        snap = tail.snapshots.get(cid)
        if snap is None or msg.offset() >= snap.effects_offset:
            tail.ledger.setdefault(cid, []).append((msg.offset(), msg.value() or b""))
    tail.seconds = time.perf_counter() - started
    return tail
