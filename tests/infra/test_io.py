"""The Kafka I/O helpers every package uses: durable and transactional producing, read to end,
partitioning and the DLQ header contract, on both broker kinds (Apache Kafka is the reference)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition

from convdb.infra.dlq import error_headers
from convdb.infra.errors import FencedError, PublishError
from convdb.infra.kafka import producer_config
from convdb.infra.partitioner import murmur2, partition_for
from convdb.infra.procs import free_port
from convdb.infra.producer import DurableProducer, TransactionalProducer
from convdb.infra.reader import partition_extents, read_to_end
from convdb.infra.settings import Settings
from convdb.schemas.topics import EVENTS
from tests.helpers import read_topic

pytestmark = pytest.mark.brokers  # the tests that take a broker run on each kind


@pytest.mark.parametrize(
    ("key", "expected"),
    [  # Kafka's UtilsTest.testMurmur2 vectors
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        ("abc", 479470107),
    ],
)
def test_murmur2_matches_the_java_client(key: str, expected: int) -> None:
    assert murmur2(key.encode()) == expected


def test_dlq_headers_name_the_record_the_refuser_and_the_error() -> None:
    headers = dict(error_headers("views", "ns.events", 3, 41, ValueError("x" * 5000)))
    assert headers == {
        "convdb.error.class": b"ValueError",
        "convdb.error.message": b"x" * 4000,
        "convdb.original.topic": b"ns.events",
        "convdb.original.partition": b"3",
        "convdb.original.offset": b"41",
        "convdb.consumer": b"views",
    }


@pytest.mark.kafka
def test_send_is_durable_where_partition_for_says(settings: Settings) -> None:
    producer = DurableProducer(settings)
    topic = EVENTS.name(settings.namespace)
    for key in ("conv-1", "conv-2", "a-little-bit-long-string"):
        delivery = producer.send(topic, key, b"v")
        assert delivery.done and delivery.offset >= 0
        assert delivery.partition == partition_for(key, settings.partitions)


@pytest.mark.kafka
def test_unreachable_broker_raises_naming_topic_and_key(make_settings: Callable[..., Settings]) -> None:
    s = make_settings(bootstrap_servers=f"127.0.0.1:{free_port()}")
    s = s.model_copy(update={"kafka": s.kafka.model_copy(update={"delivery_timeout_s": 2.0})})
    started = time.monotonic()
    with pytest.raises(PublishError, match=r"ns-x\.events\[\?\] key=conv-9: not (delivered|acknowledged)"):
        DurableProducer(s).send("ns-x.events", "conv-9", b"v")
    assert time.monotonic() - started < 2.0 + 6.0


def _batched(settings: Settings, topic: str, partition: int, batches: int, size: int) -> None:
    """Write `batches` producer batches of `size` records each (multi-record batches)."""
    conf = producer_config(settings)
    conf["linger.ms"] = 200
    producer = Producer(conf)
    for b in range(batches):
        for i in range(size):
            producer.produce(topic, f"{b}-{i}".encode(), f"k{i % 2}", partition=partition)
        assert producer.flush(30) == 0


@pytest.mark.kafka
def test_read_to_end_reads_multi_record_batches_to_the_fetch_reported_end(settings: Settings) -> None:
    topic = EVENTS.name(settings.namespace)
    _batched(settings, topic, 1, batches=3, size=5)
    found = read_to_end(settings, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)])
    assert [m.value() for m in found[(topic, 1)].records] == [
        f"{b}-{i}".encode() for b in range(3) for i in range(5)
    ]
    assert found[(topic, 1)].end == 15  # ListOffsets on the embedded broker says 11 here (§1.5)
    assert (found[(topic, 0)].records, found[(topic, 0)].end) == ([], 0)
    tail = read_to_end(settings, [TopicPartition(topic, 1, 12)], keep=lambda m: m.key() == b"k0")
    assert [m.offset() for m in tail[(topic, 1)].records] == [12, 14]
    assert tail[(topic, 1)].end == 15
    assert partition_extents(settings, topic)[1] == (0, 15)


@pytest.mark.kafka
def test_atomic_group_is_all_or_nothing_and_a_newer_writer_fences(settings: Settings) -> None:
    topic = EVENTS.name(settings.namespace)
    writer = TransactionalProducer(settings, f"{settings.namespace}-tx")
    deliveries = writer.atomic(
        lambda: [writer.produce_raw(topic, "c", b"1"), writer.produce_raw(topic, "c", b"2")]
    )
    assert [d.offset for d in deliveries] == [deliveries[0].offset, deliveries[0].offset + 1]

    def refused() -> None:
        writer.produce_raw(topic, "c", b"never")
        raise ValueError("refused before the commit")

    with pytest.raises(ValueError, match="refused"):
        writer.atomic(refused)
    writer.atomic(lambda: writer.produce_raw(topic, "c", b"3"))  # the aborted one left nothing open
    TransactionalProducer(settings, f"{settings.namespace}-tx")  # a newer writer with the same id
    with pytest.raises(FencedError, match="was fenced"):
        writer.atomic(lambda: writer.produce_raw(topic, "c", b"zombie"))
    assert sorted(v for _, _, _, v in read_topic(settings, topic, 3)) == [b"1", b"2", b"3"]
