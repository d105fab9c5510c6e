"""Poison records go to the DLQ with error headers; the consumer keeps going and counts them."""

from __future__ import annotations

import threading

import httpx
import pytest
from confluent_kafka import Producer

from convdb.consumers.index import IndexConsumer
from convdb.consumers.metrics import MetricsServer
from convdb.consumers.runner import Runner
from convdb.consumers.stats import StatsConsumer
from convdb.consumers.views import ViewsConsumer
from convdb.infra.kafka import producer_config
from convdb.infra.settings import Settings
from convdb.schemas import SingleObjectCodec
from convdb.schemas.topics import DLQ, EVENTS
from tests.conftest import wait_until
from tests.consumers.builders import conversation
from tests.consumers.procs import metric_value
from tests.consumers.verify import rows, scalar

pytestmark = pytest.mark.kafka


def read_dlq(settings: Settings, expected: int) -> list[tuple[bytes | None, bytes | None, dict[str, str]]]:
    from confluent_kafka import Consumer, TopicPartition

    topic = DLQ.name(settings.namespace)
    consumer = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": "dlq-reader"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[tuple[bytes | None, bytes | None, dict[str, str]]] = []

        def enough() -> bool:
            for msg in consumer.consume(100, 0.2):
                if msg.error() is None:
                    out.append((msg.key(), msg.value(), {k: v.decode() for k, v in msg.headers() or []}))
            return len(out) >= expected

        wait_until(enough, 30, f"{expected} DLQ records")
        return out
    finally:
        consumer.close()


def test_garbage_unknown_fingerprint_and_gap_go_to_dlq_and_consumer_continues(
    make_settings, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'store.db'}"
    settings = make_settings(store_url=url)
    from convdb.infra.kafka import apply_topics

    apply_topics(settings)
    codec = SingleObjectCodec()
    producer = Producer(producer_config(settings))
    topic = EVENTS.name(settings.namespace)
    good = conversation("good", 20)
    gap = conversation("gappy", 5)
    garbage = b"this is not avro at all"
    unknown = b"\xc3\x01" + b"\xde\xad\xbe\xef\x00\x11\x22\x33" + b"\x02\x04"
    for event in good[:10]:
        producer.produce(topic, codec.encode(event), event.conversation_id)
    producer.produce(topic, garbage, "good")
    producer.produce(topic, unknown, "good")
    for event in gap[:2] + gap[3:4]:  # seq 1, 2, then 4: a gap the projections refuse
        producer.produce(topic, codec.encode(event), event.conversation_id)
    assert producer.flush(30) == 0

    runner = Runner(settings, [ViewsConsumer(), IndexConsumer(), StatsConsumer()], name="poison")
    server = MetricsServer(runner.metrics).start()
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        for event in good[10:]:  # after the poison: the consumer must keep going
            producer.produce(topic, codec.encode(event), event.conversation_id)
        assert producer.flush(30) == 0

        def stored() -> bool:
            return scalar(url, "SELECT COUNT(*) FROM index_events") == 22

        wait_until(stored, 60, "the 22 good events in the store")
        dead = read_dlq(settings, 3)
        by_class = {h["convdb.error.class"]: (k, v, h) for k, v, h in dead}
        assert set(by_class) == {"NotAvroError", "UnknownFingerprintError", "SequenceGapError"}
        key, value, headers = by_class["NotAvroError"]
        assert (key, value) == (b"good", garbage)  # original bytes kept
        assert headers["convdb.original.topic"] == topic
        assert int(headers["convdb.original.offset"]) >= 0
        assert headers["convdb.original.partition"].isdigit()
        assert headers["convdb.consumer"] == "poison"
        assert by_class["UnknownFingerprintError"][1] == unknown
        assert "deadbeef" in by_class["UnknownFingerprintError"][2]["convdb.error.message"]
        assert "seq 4 after 2" in by_class["SequenceGapError"][2]["convdb.error.message"]
        assert dict(rows(url, "SELECT conversation_id, event_count FROM stats_conversations")) == {
            "good": 20,
            "gappy": 2,
        }
        metrics = httpx.get(f"http://127.0.0.1:{server.port}/metrics").text
        assert metric_value(metrics, "convdb_consumer_dlq_total") == 3
        assert metric_value(metrics, "convdb_consumer_events_total") == 22
        assert runner.metrics.applied == 22  # the plain count the sink bench polls
        assert httpx.get(f"http://127.0.0.1:{server.port}/healthz").status_code == 200
    finally:
        runner.stop()
        thread.join(30)
        server.stop()
    assert not thread.is_alive()
