"""Snapshot restore from the state topic after the log cleaner compacted it (where the broker does)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from convdb.infra.kafka import apply_topics, make_admin
from convdb.infra.partitioner import partition_for
from convdb.infra.settings import Settings
from convdb.producers.fleet.owner import PartitionOwner
from convdb.producers.fleet.service import build_context
from convdb.schemas import MessageEvent, Snapshot
from convdb.schemas.topics import STATE
from tests.conftest import BrokerInfo, wait_until
from tests.fleet._support import RunnerProc, fleet_settings
from tests.producers._support import events, records

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]

K = 20
BATCHES = 12

SMALL_SEGMENTS = {
    **STATE.config,
    # Every snapshot lands in its own segment (the next record rolls it), and the cleaner takes
    # any closed segment at once: compaction becomes observable within seconds.
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "0",
}


def state_topic_with_small_segments(make_settings: Callable[..., Settings]) -> Settings:
    """Settings whose state topic rolls a segment per snapshot; every other topic as usual."""
    settings = make_settings()
    name = STATE.name(settings.namespace)
    admin = make_admin(settings)
    admin.create_topics([NewTopic(name, settings.partitions, 1, config=SMALL_SEGMENTS)])[name].result(30)
    apply_topics(settings)
    return settings


def snapshot_seqs(settings: Settings, cid: str) -> list[int]:
    """`last_seq` of every snapshot of `cid` still in the state topic, in log order."""
    return [r.last_seq for r in records(settings, STATE, cid) if isinstance(r, Snapshot)]


def test_restore_from_a_compacted_state_topic(
    broker: BrokerInfo, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = state_topic_with_small_segments(make_settings)
    writer = fleet_settings(settings, tmp_path / "writer", snapshot_every=K)
    ctx = build_context(writer, tmp_path / "ws", None, None)
    cid = f"compact-{uuid.uuid4().hex[:8]}"
    partition = partition_for(cid, settings.partitions)
    owner = PartitionOwner(ctx, partition, None)
    owner.restore()
    conv = owner.create(cid, "t1")
    conv.send_message("a task with many snapshots")
    for batch in range(BATCHES):
        conv.commit(
            lambda b=batch: [
                conv.new(MessageEvent, source="agent", role="assistant", content=f"{b}.{i}") for i in range(K)
            ]
        )
        time.sleep(0.15)  # older than segment.ms: the next snapshot rolls a new segment
    newest = conv.state.view.last_seq
    conv.commit(lambda: [conv.new(MessageEvent, source="agent", role="assistant", content="uncovered")])

    if broker.capabilities.compaction:
        # Compacted: only the newest snapshot of the key (and maybe one in the active segment) is left.
        seqs = wait_until(
            lambda: (s := snapshot_seqs(settings, cid)) and len(s) <= 2 and s,
            60,
            "the log cleaner to compact the state topic",
        )
        assert isinstance(seqs, list) and seqs[-1] == newest
    else:
        # The embedded broker never compacts (capability record): every snapshot is still there.
        seqs = snapshot_seqs(settings, cid)
        assert len(seqs) >= BATCHES and seqs[-1] == newest

    other = fleet_settings(settings, tmp_path / "other")
    runner = RunnerProc(other, tmp_path / "ws", None, tmp_path / "runner.log")
    try:
        assigned = wait_until(
            lambda: runner.events("assigned"), 60, "the runner's assignment", logs=runner.logs
        )
        report = {r["partition"]: r for r in assigned[0]["restored"]}[partition]
        assert report["source"] == "changelog"
        assert report["tail_events"][cid] == 1  # only the event no snapshot covers
        assert report["state_read"] == len(seqs)
    finally:
        runner.stop()

    again = PartitionOwner(ctx, partition, None)  # the runner process fenced `owner`
    again.restore()
    restored = again.conversations[cid]
    assert restored.state.view.last_seq == newest + 1
    assert restored.send_message("one more thing") and restored.run() == "finished"
    seqs_written = [e.seq for e in events(settings, cid)]
    assert seqs_written == list(range(1, len(seqs_written) + 1))
