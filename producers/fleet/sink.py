"""The partition's writer: every group of records is one transaction under the partition's id.

The inbox offset of the message being handled rides in the transaction that appends its
MessageEvent (or in the first transaction, for other commands), so the message is appended
exactly once: either both are committed or neither is. Records the runner batches (OpenHands
payloads, dead letters) share one transaction, with the offset after the last of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from convdb.infra.producer import Delivery
from convdb.producers.publisher import RawRecord, TransactionalPublisher
from convdb.schemas import AvroModel, EventEnvelope
from convdb.schemas.topics import Topic


class PartitionSink:
    """A `RecordSink` writing transactionally; attaches pending inbox offsets to its transactions."""

    def __init__(
        self, publisher: TransactionalPublisher, consumer: Consumer | None, inbox_topic: str, partition: int
    ) -> None:
        self.publisher = publisher
        self.consumer = consumer
        self.inbox_topic = inbox_topic
        self.partition = partition
        self._offset: int | None = None
        self._event_id: str | None = None
        self.commits = 0
        """Transactions committed (progress, as the runner's stall report counts it)."""

    def attach_offset(self, next_offset: int, event_id: str | None = None) -> None:
        """Commit the inbox position `next_offset` with the next transaction (holding `event_id`)."""
        self._offset, self._event_id = next_offset, event_id

    @property
    def offset_pending(self) -> bool:
        """True while an attached inbox offset is not committed yet."""
        return self._offset is not None

    def _offsets_for(self, records: Sequence[tuple[Topic[Any], AvroModel]]) -> list[TopicPartition] | None:
        if self._offset is None or self.consumer is None:
            return None
        if self._event_id is not None and not any(
            isinstance(r, EventEnvelope) and r.id == self._event_id for _, r in records
        ):
            return None
        return [TopicPartition(self.inbox_topic, self.partition, self._offset)]

    def write(self, records: Sequence[tuple[Topic[Any], AvroModel]]) -> list[Delivery]:
        """One transaction; raises `FencedError` when a newer runner owns the partition."""
        offsets = self._offsets_for(records)
        metadata = self.consumer.consumer_group_metadata() if offsets and self.consumer else None
        deliveries = self.publisher.publish_atomic(list(records), offsets, metadata)
        self.commits += 1
        if offsets:
            self._offset = self._event_id = None
        return deliveries

    def commit_offset(self) -> None:
        """Commit a still-pending inbox offset on its own (the command wrote nothing)."""
        if self._offset is None or self.consumer is None:
            return
        self._event_id = None
        self.write([])

    def write_batch(
        self,
        records: Sequence[tuple[Topic[Any], AvroModel]],
        raw: Sequence[RawRecord],
        next_offset: int,
        before_commit: Callable[[], object] | None = None,
    ) -> list[Delivery]:
        """One transaction for several inbox records: their records, their dead letters, and the
        inbox position after the last; deliveries of `records` then `raw`, in that order."""
        offsets = [TopicPartition(self.inbox_topic, self.partition, next_offset)] if self.consumer else None
        metadata = self.consumer.consumer_group_metadata() if self.consumer else None
        deliveries = self.publisher.publish_atomic(
            records, offsets, metadata, raw=raw, before_commit=before_commit
        )
        self.commits += 1
        self._offset = self._event_id = None
        return deliveries

    def dead_letter(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: list[tuple[str, bytes]],
        also: Sequence[RawRecord] = (),
    ) -> None:
        """Write a record to the DLQ together with the pending inbox offset (one transaction), and the
        `also` records (a refused child's report to its parent)."""
        offsets = self._offsets_for([]) if self._event_id is None else None
        metadata = self.consumer.consumer_group_metadata() if offsets and self.consumer else None

        def produce() -> None:
            self.publisher.produce_raw(topic, key, value, headers)
            for record in also:
                self.publisher.produce_raw(*record)

        self.publisher.atomic(
            produce,
            offsets,
            metadata,
            step="dead-letter commit",
        )
        self.commits += 1
        self._offset = None
