"""The event publisher: idempotent (or transactional) confluent-kafka producer, keyed by conversation."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Producer, TopicPartition

from convdb.infra.errors import PublishError
from convdb.infra.producer import Delivery, DurableProducer, Headers, TransactionalProducer
from convdb.infra.settings import Settings
from convdb.producers.errors import SequenceGapError
from convdb.schemas import AvroModel, Codec, EventEnvelope
from convdb.schemas.topics import EVENTS, Topic

logger = logging.getLogger(__name__)

RawRecord = tuple[str, bytes | None, bytes, Headers]
"""A record copied as it is (topic, key, value, headers): a dead letter."""


class SequenceCheck:
    """Refuses an event whose seq is not the next one for its conversation."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def check(self, event: EventEnvelope) -> None:
        """Raise `SequenceGapError` unless `event.seq` is last + 1 (any seq is fine at first sight).

        seq 0 marks an annotation outside the chain (a TitleEvent) and is not checked.
        """
        if event.seq == 0:
            return
        last = self._last.get(event.conversation_id)
        if last is not None and event.seq != last + 1:
            raise SequenceGapError(
                f"conversation {event.conversation_id}: seq {event.seq} after {last} "
                f"({event.kind} {event.id})"
            )
        self._last[event.conversation_id] = event.seq

    def forget(self, conversation_id: str) -> None:
        """Drop what is known of a conversation (after a rollback or a handover)."""
        self._last.pop(conversation_id, None)


def key_of(record: AvroModel) -> str:
    """The Kafka key of a record: its conversation id."""
    return record.conversation_id


class EventPublisher(DurableProducer):
    """Publishes records keyed by conversation_id and waits until they are durable.

    Raises `PublishError` instead of dropping anything: from `wait_durable`/`flush` when the
    broker stays unreachable past `kafka.delivery_timeout_s`.
    """

    def __init__(self, settings: Settings, codec: Codec, producer: Producer | None = None) -> None:
        super().__init__(settings, producer)
        self.codec = codec
        self.sequence = SequenceCheck()

    def topic_name(self, topic: Topic[Any]) -> str:
        """Full name of a registry topic."""
        return topic.name(self.settings.namespace)

    def publish(self, record: AvroModel, topic: Topic[Any] = EVENTS) -> Delivery:
        """Encode and enqueue one record; returns its `Delivery` (not yet durable)."""
        if isinstance(record, EventEnvelope):
            self.sequence.check(record)
        return self.produce_raw(self.topic_name(topic), key_of(record), self.codec.encode(record))

    def publish_durable(self, records: Sequence[AvroModel], topic: Topic[Any] = EVENTS) -> list[Delivery]:
        """Publish records and wait until all are durable."""
        return self.wait_durable([self.publish(r, topic) for r in records])


class TransactionalPublisher(EventPublisher, TransactionalProducer):
    """Publishes groups of records atomically under one `transactional.id`.

    A newer producer with the same id fences this one: every later call raises `FencedError`.
    """

    def __init__(
        self, settings: Settings, codec: Codec, transactional_id: str, init_timeout: float = 30.0
    ) -> None:
        TransactionalProducer.__init__(self, settings, transactional_id, init_timeout)
        self.codec = codec
        self.sequence = SequenceCheck()

    def publish_atomic(
        self,
        records: Sequence[tuple[Topic[Any], AvroModel]],
        offsets: list[TopicPartition] | None = None,
        group_metadata: Any = None,
        timeout: float | None = None,
        *,
        raw: Sequence[RawRecord] = (),
        before_commit: Callable[[], object] | None = None,
    ) -> list[Delivery]:
        """Publish all records, then the `raw` ones (and commit consumer offsets, if given) in one
        transaction; `before_commit` runs once everything is produced (a crash point).

        Returns the deliveries (partition and offset of each record) in produce order.
        """

        def produce() -> None:
            for topic, record in records:
                self.publish(record, topic)
            for topic_name, key, value, headers in raw:
                self.produce_raw(topic_name, key, value, headers)
            if before_commit is not None:
                before_commit()

        try:
            return self.atomic(produce, offsets, group_metadata, timeout)
        except PublishError:
            for _, record in records:
                if isinstance(record, EventEnvelope):
                    self.sequence.forget(record.conversation_id)
            raise
