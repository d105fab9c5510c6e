"""The dead-letter queue: poison records go to `convdb.dlq` with their original bytes and the error.

A record is dead-lettered *before* the batch's store transaction commits its offset, and the
runner waits until the DLQ write is durable: a crash in between re-sends it (at-least-once
into the DLQ; the `convdb.original.*` headers identify duplicates), and nothing is lost.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from consumers.errors import DeadLetterError
from infra.kafka import make_producer
from infra.settings import Settings
from schemas.topics import DLQ

logger = logging.getLogger(__name__)

HEADER_PREFIX = "convdb."
"""Every DLQ header name starts with this."""


def error_headers(
    consumer: str, topic: str, partition: int, offset: int, error: BaseException
) -> list[tuple[str, bytes]]:
    """Headers that say which record failed, where it came from, and why."""
    return [
        ("convdb.error.class", type(error).__name__.encode()),
        ("convdb.error.message", str(error).encode()[:4000]),
        ("convdb.original.topic", topic.encode()),
        ("convdb.original.partition", str(partition).encode()),
        ("convdb.original.offset", str(offset).encode()),
        ("convdb.consumer", consumer.encode()),
    ]


class DeadLetters:
    """Sends poison records to the DLQ topic and waits until they are durable."""

    def __init__(self, settings: Settings, consumer: str, producer: Producer | None = None) -> None:
        self.topic = DLQ.name(settings.namespace)
        self.consumer = consumer
        self.timeout = settings.kafka.delivery_timeout_s
        self._producer = producer or make_producer(settings)
        self._errors: list[str] = []
        self._pending = 0

    def send(self, msg: Message, error: BaseException) -> None:
        """Enqueue one poison record, keeping its key and value bytes."""
        headers = error_headers(self.consumer, msg.topic(), msg.partition(), msg.offset(), error)
        logger.error(
            "poison record %s[%s]@%s -> DLQ: %s: %s",
            msg.topic(),
            msg.partition(),
            msg.offset(),
            type(error).__name__,
            error,
        )
        self._produce(msg.key(), msg.value(), headers)

    def _produce(self, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                self._producer.produce(self.topic, value, key, headers=headers, on_delivery=self._delivered)
                self._pending += 1
                return
            except BufferError:
                if time.monotonic() > deadline:
                    raise DeadLetterError(f"{self.topic}: local queue full for {self.timeout}s") from None
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise DeadLetterError(f"{self.topic}: produce rejected: {exc}") from exc

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        self._pending -= 1
        if err is not None:
            self._errors.append(err.str())

    def wait_durable(self) -> None:
        """Block until every enqueued record is acknowledged.

        Raises:
            DeadLetterError: a record was not delivered in time (the caller must not commit).
        """
        deadline = time.monotonic() + self.timeout + 5.0
        while self._pending > 0 and time.monotonic() < deadline:
            self._producer.flush(0.5)
        if self._pending > 0 or self._errors:
            errors, self._errors = self._errors, []
            raise DeadLetterError(
                f"{self.topic}: {self._pending} poison record(s) not acknowledged; errors: {errors[:3]}"
            )

    def close(self) -> None:
        """Flush what is pending."""
        self._producer.flush(self.timeout)
