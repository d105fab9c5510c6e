"""Read a topic from offsets or a time to its end: the plumbing under tail, export and replay.

The end of a partition is the high watermark the *fetch* reports (partition EOF events), never
ListOffsets: the embedded broker answers ListOffsets wrongly for multi-record batches.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, Message, TopicPartition

from infra.errors import InfraError
from infra.kafka import common_config
from infra.settings import Settings


def partitions_of(consumer: Consumer, topic: str, timeout: float = 10.0) -> list[int]:
    """Partition ids of a topic; raises `InfraError` when the topic does not exist."""
    meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        raise InfraError(f"topic {topic} does not exist (run `convdb topics apply`)")
    return sorted(meta.partitions)


def start_positions(
    consumer: Consumer,
    topic: str,
    partitions: list[int],
    from_offset: int | None = None,
    from_timestamp: datetime | None = None,
) -> list[TopicPartition]:
    """Where to start in each partition: an offset, the first offset at/after a time, or the start."""
    if from_timestamp is not None:
        ms = int(from_timestamp.timestamp() * 1000)
        found = consumer.offsets_for_times([TopicPartition(topic, p, ms) for p in partitions], 10.0)
        # -1 means "no record at or after that time": start at the end.
        return [
            TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END) for tp in found
        ]
    offset = OFFSET_BEGINNING if from_offset is None else from_offset
    return [TopicPartition(topic, p, offset) for p in partitions]


def read_topic(
    settings: Settings,
    topic: str,
    *,
    from_offset: int | None = None,
    from_timestamp: datetime | None = None,
    partitions: list[int] | None = None,
    follow: bool = False,
    poll_timeout: float = 0.5,
) -> Iterator[Message]:
    """Yield the records of a topic in per-partition order, then stop at the end (unless `follow`)."""
    consumer = Consumer(
        {
            **common_config(settings),
            "group.id": f"{settings.namespace}.reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        parts = partitions if partitions is not None else partitions_of(consumer, topic)
        consumer.assign(start_positions(consumer, topic, parts, from_offset, from_timestamp))
        at_end: set[int] = set()
        while follow or len(at_end) < len(parts):
            for msg in consumer.consume(500, poll_timeout):
                err = msg.error()
                if err is None:
                    at_end.discard(msg.partition())
                    yield msg
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                elif err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                    raise InfraError(f"{topic}[{msg.partition()}]: offset out of range")
                elif not err.retriable():
                    raise InfraError(f"reading {topic}: {err.str()}")
    finally:
        consumer.close()
