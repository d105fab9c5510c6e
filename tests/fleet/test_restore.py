"""Restore cost: a 10k-event conversation resumes from its snapshot plus a tail of at most K events."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from convdb.infra.partitioner import partition_for
from convdb.infra.settings import Settings
from convdb.producers.conversation import Conversation
from convdb.producers.fleet.owner import PartitionOwner
from convdb.producers.fleet.service import build_context
from convdb.schemas import CondensationEvent, MessageEvent
from tests.conftest import wait_until
from tests.fleet._support import RunnerProc, fleet_settings
from tests.producers._support import events

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]

K = 100
BATCH = 200
TAIL = 60


def write_long_conversation(conv: Conversation, total: int) -> None:
    """`total` events in transactions of BATCH; each batch ends with a condensation (a real condenser
    keeps the view bounded), then TAIL more events that no snapshot covers."""
    conv.send_message("a very long task")
    while conv.state.view.last_seq < total - TAIL:

        def batch() -> list[object]:
            out = []
            for i in range(BATCH - 1):
                role, source = ("user", "user") if i % 2 else ("assistant", "agent")
                out.append(conv.new(MessageEvent, source=source, role=role, content=f"turn {i} " + "x" * 80))
            visible = [e.id for e in conv.state.view.visible][1:] + [e.id for e in out][:-20]
            out.append(
                conv.new(
                    CondensationEvent,
                    source="agent",
                    forgotten_event_ids=tuple(visible),
                    summary=f"summary up to seq {conv.state.view.last_seq + BATCH - 1}",
                )
            )
            return out

        conv.commit(batch)
    for _ in range(TAIL // 20):
        conv.commit(
            lambda: [
                conv.new(MessageEvent, source="agent", role="assistant", content="tail") for _ in range(20)
            ]
        )


def test_a_10k_event_conversation_restores_from_its_snapshot_and_a_short_tail(
    settings: Settings, tmp_path: Path
) -> None:
    writer = fleet_settings(settings, tmp_path / "writer", snapshot_every=K)
    ctx = build_context(writer, tmp_path / "ws", None, None)
    cid = f"long-{uuid.uuid4().hex[:8]}"
    partition = partition_for(cid, settings.partitions)
    owner = PartitionOwner(ctx, partition, None)
    owner.restore()
    conv = owner.create(cid, "t1")
    started = time.perf_counter()
    write_long_conversation(conv, 10_000)
    print(f"\nwrote {conv.state.view.last_seq} events in {time.perf_counter() - started:.1f}s")
    assert conv.state.view.last_seq >= 10_000
    assert conv.positions.events_since_snapshot == TAIL

    # A new owner on this machine: local store + changelog tail (empty) + events tail.
    started = time.perf_counter()
    local = PartitionOwner(ctx, partition, None)  # fences `owner`
    report = local.restore()
    local_ms = (time.perf_counter() - started) * 1000
    restored = local.conversations[cid]
    assert report["source"] == "local"
    assert report["tail_events"][cid] == TAIL <= K
    assert report["events_read"] <= K + 1
    assert [e.id for e in restored.state.view.visible] == [e.id for e in conv.state.view.visible]
    assert (restored.state.view.last_seq, restored.state.view.active_leaf) == (
        conv.state.view.last_seq,
        conv.state.view.active_leaf,
    )
    print(
        f"resume (local store) of {conv.state.view.last_seq} events: {local_ms:.1f} ms "
        f"(restore {report['ms']} ms, events read {report['events_read']})"
    )

    # Another machine: a runner process with an empty data dir restores from the state topic.
    other = fleet_settings(settings, tmp_path / "other", snapshot_every=K)
    runner = RunnerProc(other, tmp_path / "ws", None, tmp_path / "runner.log")
    try:
        assigned = wait_until(
            lambda: runner.events("assigned"), 60, "the runner's assignment", logs=runner.logs
        )
        reports = {r["partition"]: r for r in assigned[0]["restored"]}
        remote = reports[partition]
        assert remote["source"] == "changelog"
        assert remote["tail_events"][cid] == TAIL <= K
        assert remote["events_read"] <= K + 1
        print(
            f"resume (state topic, {remote['state_read']} snapshot records) in a runner process: "
            f"{remote['ms']} ms, events read {remote['events_read']}"
        )
    finally:
        runner.stop()

    # The restored conversation carries on with gap-free seqs.
    again = PartitionOwner(ctx, partition, None)  # the runner process fenced `local`
    again.restore()
    restored = again.conversations[cid]
    assert restored.send_message("one more thing") and restored.run() == "finished"
    seqs = [e.seq for e in events(settings, cid)]
    assert seqs == list(range(1, len(seqs) + 1))
