"""The publisher against a real broker: order, gap-free seq, durability, loud failure."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from convdb.infra.settings import Settings
from convdb.producers.errors import PublishError, SequenceGapError
from convdb.producers.publisher import EventPublisher, TransactionalPublisher
from convdb.schemas import MessageEvent, SingleObjectCodec
from convdb.schemas.topics import EVENTS
from tests.helpers import new_id, now, read_topic

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]


def message(conv: str, seq: int, text: str = "hi") -> MessageEvent:
    return MessageEvent(
        id=new_id(),
        conversation_id=conv,
        tenant_id="t1",
        seq=seq,
        timestamp=now(),
        source="user",
        role="user",
        content=text,
    )


def test_per_conversation_order_and_gap_free_seq_with_50_interleaved(settings: Settings) -> None:
    codec = SingleObjectCodec()
    publisher = EventPublisher(settings, codec)
    convs = [f"conv-{i}" for i in range(50)]
    for seq in range(1, 21):
        for conv in convs:
            publisher.publish(message(conv, seq, f"{conv}#{seq}"))
    publisher.flush()

    records = read_topic(settings, EVENTS.name(settings.namespace), 50 * 20)
    assert len(records) == 1000
    seen: dict[str, list[int]] = defaultdict(list)
    partitions: dict[str, set[int]] = defaultdict(set)
    for partition, _offset, key, value in sorted(records, key=lambda r: (r[0], r[1])):
        event = codec.decode(value)
        assert key is not None and key.decode() == event.conversation_id
        seen[event.conversation_id].append(event.seq)
        partitions[event.conversation_id].add(partition)
    assert set(seen) == set(convs)
    for conv in convs:
        assert seen[conv] == list(range(1, 21)), conv  # in order, no gap, no duplicate
        assert len(partitions[conv]) == 1  # one conversation -> one partition
    assert len({p for ps in partitions.values() for p in ps}) > 1  # spread over partitions


def test_seq_gap_and_duplicate_are_refused_before_sending(settings: Settings) -> None:
    publisher = EventPublisher(settings, SingleObjectCodec())
    publisher.publish(message("c", 1))
    with pytest.raises(SequenceGapError, match="seq 3 after 1"):
        publisher.publish(message("c", 3))
    with pytest.raises(SequenceGapError, match="seq 1 after 1"):
        publisher.publish(message("c", 1))
    publisher.flush()


def test_publish_durable_reports_offsets(settings: Settings) -> None:
    publisher = EventPublisher(settings, SingleObjectCodec())
    deliveries = publisher.publish_durable([message("d", 1), message("d", 2)])
    assert [d.offset for d in deliveries] == [deliveries[0].offset, deliveries[0].offset + 1]
    assert all(d.partition >= 0 for d in deliveries)


def test_transactional_group_is_atomic(settings: Settings) -> None:
    publisher = TransactionalPublisher(settings, SingleObjectCodec(), f"{settings.namespace}-tx")
    publisher.publish_atomic([(EVENTS, message("x", 1)), (EVENTS, message("x", 2))])
    records = read_topic(settings, EVENTS.name(settings.namespace), 2)
    assert len(records) == 2


def test_unreachable_broker_raises_within_deadline(make_settings) -> None:  # type: ignore[no-untyped-def]
    from convdb.infra.procs import free_port

    s = make_settings(bootstrap_servers=f"127.0.0.1:{free_port()}")
    s = s.model_copy(update={"kafka": s.kafka.model_copy(update={"delivery_timeout_s": 2.0})})
    publisher = EventPublisher(s, SingleObjectCodec())
    started = time.monotonic()
    with pytest.raises(PublishError, match="not delivered|not acknowledged"):
        publisher.publish_durable([message("u", 1)])
    assert time.monotonic() - started < 2.0 + 6.0
