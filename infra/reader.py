"""Read topic-partitions to their end: the plumbing under tail, export, replay and restore.

The end of a partition is the high watermark the *fetch* reports (partition EOF events and
`get_watermark_offsets(cached=True)`), never ListOffsets: the embedded broker answers
ListOffsets wrongly for multi-record batches (INFRA-NOTES §1.5).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, Message, TopicPartition

from convdb.infra.errors import InfraError
from convdb.infra.kafka import common_config, fetch_wait_ms
from convdb.infra.records import coordinates
from convdb.infra.settings import Settings

Partition = tuple[str, int]
"""(topic, partition)."""


def reader_consumer(settings: Settings, purpose: str, **overrides: Any) -> Consumer:
    """An assign-only consumer that reports partition ends, in a throwaway group named for `purpose`."""
    return Consumer(
        {
            **common_config(settings),
            "group.id": f"{settings.namespace}.{purpose}-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            # An empty fetch at the end is held this long: it bounds how long "read to end" waits.
            "fetch.wait.max.ms": fetch_wait_ms(settings),
            **overrides,
        }
    )


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


def consume_to_end(
    consumer: Consumer,
    partitions: Sequence[Partition],
    ends: dict[Partition, int],
    *,
    follow: bool = False,
    poll_timeout: float = 0.2,
    batch: int = 1000,
) -> Iterator[Message]:
    """Yield the records of the assigned `partitions`, each up to the end the fetch reports.

    `ends` is updated as it goes: the next offset after what was read, or the end reported.
    A partition at its end is paused; with `follow`, reading goes on until the caller stops.
    """
    todo = set(partitions)
    while follow or todo:
        for msg in consumer.consume(batch, poll_timeout):
            err = msg.error()
            if err is None:
                topic, partition, offset = coordinates(msg)
                ends[(topic, partition)] = offset + 1
                yield msg
            elif err.code() == KafkaError._PARTITION_EOF:
                topic, partition, offset = coordinates(msg)
                tp = (topic, partition)
                ends[tp] = max(ends.get(tp, 0), offset)
                if not follow and tp in todo:
                    todo.discard(tp)
                    consumer.pause([TopicPartition(topic, partition)])
            elif err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                raise InfraError(f"{msg.topic()}[{msg.partition()}]: offset out of range")
            elif not err.retriable():
                raise InfraError(f"reading {msg.topic()}[{msg.partition()}]: {err.str()}")


@dataclass
class PartitionRead:
    """What `read_to_end` found in one partition."""

    records: list[Message] = field(default_factory=list)
    end: int = 0
    """The next offset after the last record read: the partition's end when it was read."""


def read_to_end(
    settings: Settings,
    starts: Sequence[TopicPartition],
    *,
    keep: Callable[[Message], bool] | None = None,
    purpose: str = "reader",
    **overrides: Any,
) -> dict[Partition, PartitionRead]:
    """The records of each topic-partition from its start offset to its end (those `keep` accepts).

    One consumer reads every partition at once: the embedded broker holds an empty fetch, so
    reading them one by one would cost that wait per partition.
    """
    consumer = reader_consumer(settings, purpose, **overrides)
    found = {(tp.topic, tp.partition): PartitionRead(end=max(tp.offset, 0)) for tp in starts}
    ends = {tp: read.end for tp, read in found.items()}
    try:
        consumer.assign(list(starts))
        for msg in consume_to_end(consumer, list(found), ends, poll_timeout=0.05, batch=2000):
            if keep is None or keep(msg):
                topic, partition, _ = coordinates(msg)
                found[(topic, partition)].records.append(msg)
    finally:
        consumer.close()
    for tp, read in found.items():
        read.end = ends[tp]
    return found


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
    consumer = reader_consumer(settings, "reader")
    try:
        parts = partitions if partitions is not None else partitions_of(consumer, topic)
        consumer.assign(start_positions(consumer, topic, parts, from_offset, from_timestamp))
        wanted = [(topic, p) for p in parts]
        yield from consume_to_end(consumer, wanted, {}, follow=follow, poll_timeout=poll_timeout, batch=500)
    finally:
        consumer.close()


def partition_extents(settings: Settings, topic: str, timeout: float = 30.0) -> dict[int, tuple[int, int]]:
    """(first offset, high watermark) of each partition of a topic, as the fetch reports them.

    Reads one small fetch per partition, not the partition: the watermark comes with it.
    """
    consumer = reader_consumer(settings, "extents", **{"max.partition.fetch.bytes": 1024})
    try:
        parts = partitions_of(consumer, topic)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        low: dict[int, int] = {}
        found: dict[int, tuple[int, int]] = {}
        deadline = time.monotonic() + timeout
        while len(found) < len(parts):
            if time.monotonic() > deadline:
                raise InfraError(f"{topic}: no fetch answer for partitions {sorted(set(parts) - set(found))}")
            for msg in consumer.consume(100, 0.2):
                err = msg.error()
                if msg.partition() in found:
                    continue
                if err is None:
                    _, p, offset = coordinates(msg)
                    low.setdefault(p, offset)
                    high = consumer.get_watermark_offsets(TopicPartition(topic, p), cached=True)[1]
                    if high >= 0:
                        found[p] = (low[p], high)
                        consumer.pause([TopicPartition(topic, p)])
                elif err.code() == KafkaError._PARTITION_EOF:
                    _, p, offset = coordinates(msg)
                    found[p] = (low.get(p, offset), offset)
                elif not err.retriable():
                    raise InfraError(f"reading {topic}[{msg.partition()}]: {err.str()}")
        return found
    finally:
        consumer.close()
