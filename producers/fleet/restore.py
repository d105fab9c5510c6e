"""Restore one partition's conversations: snapshots (local store, else the state topic), then tails.

1. Snapshots: the local store, plus every state-topic record after its checkpoint (the embedded
   broker does not compact, so without a local store the whole state partition is read; only the
   newest record per conversation is decoded).
2. The newest snapshot of the partition says from which events/effects offsets a restore must
   read so that every event no snapshot covers is seen. Both partitions are read from there to
   the end the fetch reports (never ListOffsets).

A record that is not what its topic and key say (garbage bytes, another producer's record, a
snapshot of another conversation) is refused, never a reason to stop: the owner dead-letters it
and restores the rest (`PartitionOwner.restore`). A conversation whose newest snapshot is such a
record is restored from its events, read from the partition's start.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message, TopicPartition

from convdb.infra.reader import read_to_end
from convdb.infra.records import coordinates
from convdb.infra.settings import Settings
from convdb.producers.fleet.snapshot import restored_positions, restored_state
from convdb.producers.fleet.store import SnapshotStore
from convdb.producers.positions import LogPositions
from convdb.producers.state import ConversationState
from convdb.projections.errors import ProjectionError, TenantMismatchError
from convdb.projections.tenancy import check_owner
from convdb.schemas import Codec, Event, LedgerRecord, Snapshot
from convdb.schemas.errors import SchemaError
from convdb.schemas.topics import EFFECTS, EVENTS, STATE
from convdb.schemas.validation import shown

logger = logging.getLogger(__name__)


Refused = tuple[str, int, bytes | None, bytes, Exception]
"""A record a restore could not use: topic, offset, key, value, and why (its dead letter)."""


@dataclass
class PartitionTail:
    """What a restore read for one partition."""

    partition: int
    namespace: str = ""
    snapshots: dict[str, Snapshot] = field(default_factory=dict)
    events: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    """conversation_id -> (offset, encoded event) after its snapshot, in log order."""
    ledger: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    refused: list[Refused] = field(default_factory=list)
    """State records that are no snapshot of the conversation they are keyed by (foreign records)."""
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
) -> tuple[Snapshot | None, bool]:
    """Fill `tail.snapshots`; returns the partition's newest snapshot (its offsets are the partition's)
    and whether a conversation lost its snapshot to a record that is none (then its events must be
    read from the partition's start)."""
    stored = store.load(partition)
    topic = STATE.name(settings.namespace)
    found, ends = _read(settings, [TopicPartition(topic, partition, stored.next_offset)])
    candidates: dict[str, list[tuple[int, bytes, bool]]] = {
        cid: [(offset, data, False)] for cid, (offset, data) in stored.snapshots.items()
    }
    for msg in found[topic]:
        key = (msg.key() or b"").decode(errors="replace")
        candidates.setdefault(key, []).append((coordinates(msg)[2], msg.value() or b"", True))
    tail.state_read = len(found[topic])
    tail.source = "changelog" if found[topic] else ("local" if stored.snapshots else "none")
    newest: dict[str, tuple[int, bytes]] = {}
    lost = False
    for cid, versions in candidates.items():
        # Newest first; only the newest usable one is decoded (the embedded broker never compacts).
        for offset, data, read_now in reversed(versions):
            try:
                tail.snapshots[cid] = _snapshot(codec, cid, data)
            except SchemaError as exc:
                if read_now:
                    tail.refused.append((topic, offset, cid.encode(), data, exc))
                continue
            newest[cid] = (offset, data)
            break
        else:
            lost = lost or bool(cid)
    if found[topic]:
        store.save(partition, [(k, newest[k][0], newest[k][1]) for k in newest], ends[topic])
    if not newest:
        return None, lost
    return tail.snapshots[max(newest, key=lambda cid: newest[cid][0])], lost


def _snapshot(codec: Codec, cid: str, data: bytes) -> Snapshot:
    """A state record as the snapshot of `cid` (a record keyed by `cid` but of another, or no
    snapshot at all, is foreign: `SchemaError`)."""
    snapshot = codec.decode(data, expect=(Snapshot,))
    if snapshot.conversation_id != cid:
        raise SchemaError(f"snapshot of {shown(snapshot.conversation_id)} keyed by {shown(cid)}")
    return snapshot


def restore_partition(
    settings: Settings, codec: Codec, store: SnapshotStore, partition: int
) -> PartitionTail:
    """Snapshots and uncovered tails of every conversation of one partition."""
    started = time.perf_counter()
    tail = PartitionTail(partition, settings.namespace)
    newest, lost = _snapshots(settings, codec, store, partition, tail)
    events_from = max(newest.partition_events_offset, 0) if newest and not lost else 0
    effects_from = max(newest.partition_effects_offset, 0) if newest else 0
    for snapshot in tail.snapshots.values():
        if not snapshot.view_complete:
            events_from = min(events_from, max(snapshot.first_events_offset, 0))
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
        _, _, offset = coordinates(msg)
        if offset >= floor:
            tail.events.setdefault(cid, []).append((offset, msg.value() or b""))
    for msg in found[effects]:
        cid = (msg.key() or b"").decode(errors="replace")
        snap = tail.snapshots.get(cid)
        _, _, offset = coordinates(msg)
        if snap is None or offset >= snap.effects_offset:
            tail.ledger.setdefault(cid, []).append((offset, msg.value() or b""))
    tail.seconds = time.perf_counter() - started
    return tail


def restore_conversation(
    codec: Codec, tail: PartitionTail, cid: str, refused: list[Refused]
) -> tuple[ConversationState, LogPositions] | None:
    """One conversation of a restored partition: its snapshot and tail folded, every tail record
    that is not its own (undecodable, another conversation's or tenant's, refused by the fold)
    appended to `refused` and skipped. None when nothing of it is left (only foreign records)."""
    snap = tail.snapshots.get(cid)
    owner = snap.tenant_id if snap else None
    events: list[tuple[int, bytes, Event]] = []
    for offset, data in tail.events.get(cid, []):
        try:
            event = _event(codec, cid, data)
            check_owner(owner, event)
        except (SchemaError, TenantMismatchError) as exc:
            refused.append((EVENTS.name(tail.namespace), offset, cid.encode(), data, exc))
            continue
        owner = owner or event.tenant_id
        events.append((offset, data, event))
    ledger: list[tuple[int, bytes, LedgerRecord]] = []
    for offset, data in tail.ledger.get(cid, []):
        try:
            record = codec.decode(data, expect=EFFECTS.value_types)
            if record.conversation_id != cid:
                raise SchemaError(f"ledger record of {shown(record.conversation_id)} keyed by {shown(cid)}")
        except SchemaError as exc:
            refused.append((EFFECTS.name(tail.namespace), offset, cid.encode(), data, exc))
            continue
        ledger.append((offset, data, record))
    dropped: set[int] = set()

    def refuse(index: int, exc: ProjectionError) -> None:
        topic, (offset, data, _) = (
            (EVENTS, events[index]) if index < len(events) else (EFFECTS, ledger[index - len(events)])
        )
        refused.append((topic.name(tail.namespace), offset, cid.encode(), data, exc))
        dropped.add(index)

    state = restored_state(cid, snap, [e for *_, e in events], [r for *_, r in ledger], codec, refuse)
    if snap is None and not state.view.log:
        return None
    kept = [o for i, (o, _, _) in enumerate(events) if i not in dropped]
    kept_ledger = [(o, r) for i, (o, _, r) in enumerate(ledger, len(events)) if i not in dropped]
    return state, restored_positions(tail.partition, snap, kept, kept_ledger)


def _event(codec: Codec, cid: str, data: bytes) -> Event:
    """An events-topic record as an event of `cid` (`SchemaError` when it is anything else)."""
    event = codec.decode(data, expect=EVENTS.value_types)
    if event.conversation_id != cid:
        raise SchemaError(f"event of {shown(event.conversation_id)} keyed by {shown(cid)}")
    return event
