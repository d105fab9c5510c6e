"""Inbox records the runner holds at once commit in ONE transaction; a crash before it loses nothing.

Several OpenHands batches for three conversations and a poison record sit in the inbox before
the runner starts. The runner is killed at `before_inbox_commit`: every event of every batch is
then in the log (a read_uncommitted reader sees them), inside one open transaction, and nothing
is committed. A second runner redoes the whole batch: each event once, in order, gap-free seqs,
the poison dead-lettered once. The embedded broker's recorded gaps (it neither aborts the dead
runner's open transaction nor hides aborted records from read_committed readers) show as such.
"""

from __future__ import annotations

import json
import signal
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from convdb.infra.kafka import apply_topics, common_config
from convdb.infra.producer import DurableProducer
from convdb.infra.reader import partition_extents, read_topic
from convdb.infra.settings import Settings
from convdb.schemas import ExternalBatch, SingleObjectCodec
from convdb.schemas.topics import DLQ, EVENTS, INBOX
from tests.conftest import BrokerInfo
from tests.producers._support import by_conversation, direct, records, runner_cmd, start

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]

CODEC = SingleObjectCodec()
TENANT = "tenant-oh"


def openhands_messages(count: int, start_at: datetime) -> list[dict[str, Any]]:
    """OpenHands MessageEvents alternating user/agent, chained by parent_id."""
    out: list[dict[str, Any]] = []
    for i in range(count):
        role, source = ("user", "user") if i % 2 == 0 else ("assistant", "agent")
        out.append(
            {
                "id": str(uuid.uuid4()),
                "timestamp": (start_at + timedelta(seconds=i)).isoformat(),
                "source": source,
                "parent_id": out[-1]["id"] if out else None,
                "llm_message": {
                    "role": role,
                    "content": [{"cache_prompt": False, "type": "text", "text": f"turn {i}"}],
                    "tool_calls": None,
                    "thinking_blocks": [],
                },
                "llm_response_id": None,
                "activated_skills": [],
                "extended_content": [],
                "kind": "MessageEvent",
            }
        )
    return out


def batch(cid: str, events: list[dict[str, Any]]) -> bytes:
    record = ExternalBatch(
        id=str(uuid.uuid4()),
        conversation_id=cid,
        tenant_id=TENANT,
        timestamp=datetime.now(UTC),
        origin="openhands",
        payload_kind="events",
        payload=json.dumps(events),
    )
    return CODEC.encode(record)


def fill_inbox(settings: Settings) -> dict[str, list[str]]:
    """Two batches of 3 events per conversation (one batch sent twice, like a webhook retry), a poison
    record in the middle; one producer batch, so the runner's consumer holds them all at once."""
    convs = {uuid.uuid4().hex: openhands_messages(6, datetime(2026, 5, 1, 12, n)) for n in range(3)}
    producer = DurableProducer(settings)
    topic = INBOX.name(settings.namespace)
    for round_ in range(2):
        for n, (cid, events) in enumerate(convs.items()):
            half = events[round_ * 3 : round_ * 3 + 3]
            producer.produce_raw(topic, cid, batch(cid, half))
            if round_ == 1 and n == 0:
                producer.produce_raw(topic, cid, batch(cid, half))  # the retried webhook batch
                producer.produce_raw(topic, cid, b"poison: not a record")
    producer.flush()
    return {cid: [e["id"] for e in events] for cid, events in convs.items()}


def uncommitted_event_ids(settings: Settings) -> list[str]:
    """Every event id in the log (one partition), committed or not (read_uncommitted)."""
    topic = EVENTS.name(settings.namespace)
    config = {**common_config(settings), "group.id": f"{settings.namespace}.peek"}
    consumer = Consumer({**config, "isolation.level": "read_uncommitted", "enable.auto.commit": False})
    ids: list[str] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        # Until the log goes quiet: the watermarks an open transaction leaves differ between brokers.
        while (msg := consumer.poll(3)) is not None:
            if msg.error() is None:
                ids.append(CODEC.decode(msg.value()).id)
    finally:
        consumer.close()
    return ids


def test_inbox_records_held_at_once_commit_in_one_transaction_and_survive_a_crash_before_it(
    broker: BrokerInfo, make_settings: Any, tmp_path: Path
) -> None:
    settings = direct(make_settings(partitions=1))
    apply_topics(settings)
    sent = fill_inbox(settings)
    every = [i for ids in sent.values() for i in ids]

    crashing = start(runner_cmd(tmp_path, idle_exit=30), settings, CONVDB_CRASH_AT="before_inbox_commit")
    _, err = crashing.communicate(timeout=90)
    assert crashing.returncode == -signal.SIGKILL, err[-3000:]
    # Applied, all in the one transaction about to commit, and none of it committed.
    assert sorted(uncommitted_event_ids(settings)) == sorted(every)
    if broker.capabilities.read_committed_hides_aborted:
        assert records(settings, EVENTS) == []

    runner = start(runner_cmd(tmp_path, idle_exit=6), settings)
    _, err = runner.communicate(timeout=120)
    assert runner.returncode == 0, err[-3000:]

    events = by_conversation(records(settings, EVENTS))
    for cid, ids in sent.items():
        held = sorted(events[cid], key=lambda e: e.seq)
        assert [e.id for e in held] == ids, cid  # each once, in the order sent (the retry skipped)
        assert [e.seq for e in held] == list(range(1, len(ids) + 1)), cid
        assert [e.parent_id for e in held[1:]] == ids[:-1], cid
    letters = list(read_topic(settings, DLQ.name(settings.namespace)))
    if broker.capabilities.fencing_aborts_open_transaction:
        assert [m.value() for m in letters] == [b"poison: not a record"]
        # The dead runner's copy was aborted, the second runner's committed: both are in the log.
        assert sorted(uncommitted_event_ids(settings)) == sorted(every + every)
    else:
        # Known gap (capability record): the dead runner's open transaction stays readable, so its
        # events are restored as held (the mapping skips them) and its dead letter stays beside the
        # second runner's.
        assert [m.value() for m in letters] == [b"poison: not a record"] * 2
    group = Consumer({**common_config(settings), "group.id": settings.group("runner")})
    try:
        inbox = INBOX.name(settings.namespace)
        committed = group.committed([TopicPartition(inbox, 0)], timeout=30)[0].offset
    finally:
        group.close()
    assert committed == partition_extents(settings, inbox)[0][1]  # the whole inbox, once
