"""The dead-letter queue: poison records go to `convdb.dlq` with their original bytes and the error.

A record is dead-lettered *before* the batch's store transaction commits its offset, and the
runner waits until the DLQ write is durable: a crash in between re-sends it (at-least-once
into the DLQ; the `convdb.original.*` headers identify duplicates), and nothing is lost.
The headers are the one contract of `infra.dlq`.
"""

from __future__ import annotations

import logging

from confluent_kafka import Message

from infra.dlq import error_headers
from infra.errors import PublishError
from infra.producer import DurableProducer
from infra.settings import Settings
from schemas.topics import DLQ

logger = logging.getLogger(__name__)


class DeadLetters:
    """Sends poison records to the DLQ topic and waits until they are durable."""

    def __init__(self, settings: Settings, consumer: str, producer: DurableProducer | None = None) -> None:
        self.topic = DLQ.name(settings.namespace)
        self.consumer = consumer
        self._producer = producer or DurableProducer(settings)

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
        self._producer.produce_raw(self.topic, msg.key(), msg.value(), headers)

    def wait_durable(self) -> None:
        """Block until every enqueued record is acknowledged.

        Raises:
            PublishError: a record was not delivered in time (the caller must not commit).
        """
        self._producer.flush()

    def close(self) -> None:
        """Flush what is pending; a record that does not make it is sent again after a restart."""
        try:
            self._producer.close()
        except PublishError as exc:
            # Its batch never committed (`wait_durable` comes first), so the record is re-read.
            logger.warning("closing with dead letters not acknowledged (re-sent on restart): %s", exc)
