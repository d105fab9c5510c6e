"""Test helpers: event builders and a raw topic reader (not fixtures)."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

from confluent_kafka import Consumer, TopicPartition

from convdb.infra.settings import Settings


def read_topic(
    settings: Settings, topic: str, expected: int, timeout: float = 30.0
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Read every record of a topic from the start (assign, no group) until `expected` are seen.

    Returns (partition, offset, key, value) tuples in per-partition order.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[tuple[int, int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.2):
                if msg.error() is None:
                    out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def now() -> datetime:
    """Current UTC time, microsecond precision (what timestamp-micros keeps)."""
    return datetime.now(UTC)


def new_id() -> str:
    """A fresh event id."""
    return str(uuid.uuid4())
