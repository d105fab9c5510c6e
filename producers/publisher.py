"""The event publisher: idempotent (or transactional) confluent-kafka producer, keyed by conversation."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from infra.kafka import producer_config
from infra.settings import Settings
from producers.errors import FencedError, PublishError, SequenceGapError
from schemas import AvroModel, Codec, EventEnvelope
from schemas.topics import EVENTS, Topic

logger = logging.getLogger(__name__)


class Delivery:
    """The broker's answer for one produced record: partition and offset, or the error."""

    __slots__ = ("topic", "key", "partition", "offset", "error", "done")

    def __init__(self, topic: str, key: str) -> None:
        self.topic = topic
        self.key = key
        self.partition = -1
        self.offset = -1
        self.error: KafkaError | None = None
        self.done = False

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        self.error = err
        if err is None:
            self.partition = msg.partition()
            self.offset = msg.offset()
        self.done = True

    def raise_for_error(self) -> None:
        """Raise `PublishError` naming topic, key and the broker's error, if it failed."""
        if self.error is not None:
            raise PublishError(f"{self.topic} key={self.key}: not delivered: {self.error.str()}")


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
    return record.conversation_id  # type: ignore[attr-defined, no-any-return]


class EventPublisher:
    """Publishes records keyed by conversation_id and waits until they are durable.

    Raises `PublishError` instead of dropping anything: from `wait_durable`/`flush` when the
    broker stays unreachable past `kafka.delivery_timeout_s`.
    """

    def __init__(self, settings: Settings, codec: Codec, producer: Producer | None = None) -> None:
        self.settings = settings
        self.codec = codec
        self.producer = producer or Producer(producer_config(settings))
        self.sequence = SequenceCheck()
        self._pending: list[Delivery] = []
        self._deadline = settings.kafka.delivery_timeout_s

    def topic_name(self, topic: Topic) -> str:
        """Full name of a registry topic."""
        return topic.name(self.settings.namespace)

    def publish(self, record: AvroModel, topic: Topic = EVENTS) -> Delivery:
        """Encode and enqueue one record; returns its `Delivery` (not yet durable)."""
        if isinstance(record, EventEnvelope):
            self.sequence.check(record)
        return self.produce_raw(self.topic_name(topic), key_of(record), self.codec.encode(record))

    def produce_raw(
        self, topic: str, key: str, value: bytes, headers: list[tuple[str, bytes]] | None = None
    ) -> Delivery:
        """Enqueue already-encoded bytes (DLQ, benchmarks); waits while the local queue is full."""
        delivery = Delivery(topic, key)
        deadline = time.monotonic() + self._deadline
        while True:
            try:
                self.producer.produce(topic, value, key, headers=headers, on_delivery=delivery)
                break
            except BufferError as exc:
                if time.monotonic() > deadline:
                    raise PublishError(f"{topic} key={key}: local queue full for {self._deadline}s") from exc
                self.producer.poll(0.05)
            except KafkaException as exc:
                raise PublishError(f"{topic} key={key}: rejected: {exc}") from exc
        self._pending.append(delivery)
        if len(self._pending) >= 10000:
            self._reap()
        return delivery

    def _reap(self) -> None:
        self.producer.poll(0)
        pending = []
        for d in self._pending:
            if not d.done:
                pending.append(d)
            elif d.error is not None:
                d.raise_for_error()
        self._pending = pending

    def wait_durable(
        self, deliveries: Iterable[Delivery], timeout: float | None = None
    ) -> list[Delivery]:
        """Block until every delivery is acknowledged (acks=all); raise on the first failure."""
        wanted = list(deliveries)
        deadline = time.monotonic() + (self._deadline + 5.0 if timeout is None else timeout)
        for d in wanted:
            while not d.done:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise PublishError(
                        f"{d.topic} key={d.key}: not acknowledged in time; is the broker at "
                        f"{self.settings.bootstrap_servers} reachable?"
                    )
                self.producer.flush(min(remaining, 0.5))
            d.raise_for_error()
        return wanted

    def publish_durable(
        self, records: Sequence[AvroModel], topic: Topic = EVENTS
    ) -> list[Delivery]:
        """Publish records and wait until all are durable."""
        return self.wait_durable([self.publish(r, topic) for r in records])

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything published so far is durable; raise if anything failed."""
        pending, self._pending = self._pending, []
        self.wait_durable(pending, timeout)

    def close(self) -> None:
        """Flush and release the producer."""
        self.flush()


class TransactionalPublisher(EventPublisher):
    """Publishes groups of records atomically under one `transactional.id`.

    A newer producer with the same id fences this one: every later call raises `FencedError`.
    """

    def __init__(
        self, settings: Settings, codec: Codec, transactional_id: str, init_timeout: float = 30.0
    ) -> None:
        super().__init__(settings, codec, Producer(producer_config(settings, transactional_id)))
        self.transactional_id = transactional_id
        try:
            self.producer.init_transactions(init_timeout)
        except KafkaException as exc:
            raise _txn_error(transactional_id, "init_transactions", exc) from exc

    def publish_atomic(
        self,
        records: Sequence[tuple[Topic, AvroModel]],
        offsets: list[TopicPartition] | None = None,
        group_metadata: Any = None,
        timeout: float | None = None,
    ) -> list[Delivery]:
        """Publish all records (and commit consumer offsets, if given) in one transaction.

        Returns the deliveries (partition and offset of each record) in record order.
        """
        timeout = self._deadline if timeout is None else timeout
        try:
            self.producer.begin_transaction()
            for topic, record in records:
                self.publish(record, topic)
            if offsets:
                self.producer.send_offsets_to_transaction(offsets, group_metadata, timeout)
            self.producer.commit_transaction(timeout)
        except SequenceGapError:
            # Refused before anything was committed: end the open transaction so the next one can begin.
            self._pending.clear()
            self.producer.abort_transaction(timeout)
            raise
        except KafkaException as exc:
            self._pending.clear()
            for _, record in records:
                if isinstance(record, EventEnvelope):
                    self.sequence.forget(record.conversation_id)
            error = exc.args[0]
            if error.txn_requires_abort():
                try:
                    self.producer.abort_transaction(timeout)
                except KafkaException:
                    logger.exception("abort_transaction failed for %s", self.transactional_id)
            raise _txn_error(self.transactional_id, "commit", exc) from exc
        pending, self._pending = self._pending, []
        for d in pending:
            d.raise_for_error()
        return pending


def _txn_error(transactional_id: str, step: str, exc: KafkaException) -> PublishError:
    error = exc.args[0]
    if error.fatal() or error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ):
        return FencedError(
            f"transactional.id {transactional_id} was fenced at {step}: {error.str()}"
        )
    return PublishError(f"transactional.id {transactional_id}: {step} failed: {error.str()}")
