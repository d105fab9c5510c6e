"""The dead-letter queue: poison records go to `convdb.dlq` with their original bytes and the error.

A record is dead-lettered *before* the batch's store transaction commits its offset, and the
runner waits until the DLQ write is durable: a crash in between re-sends it (at-least-once
into the DLQ; the `convdb.original.*` headers identify duplicates), and nothing is lost.
The headers are the one contract of `convdb.infra.dlq`.

A record the DLQ cannot take as it is (the copy, headers added, is over the producer's or the
broker's size limit) is dead-lettered without its value, with a header saying so: the original
stays at the coordinates the headers name (and in the archive). Else one oversized record would
stop the consumer on every restart.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException, Message

from convdb.infra.dlq import error_headers
from convdb.infra.errors import PublishError
from convdb.infra.producer import Delivery, DurableProducer
from convdb.infra.records import coordinates
from convdb.infra.settings import Settings
from convdb.schemas.topics import DLQ

logger = logging.getLogger(__name__)

OMITTED = "convdb.dlq.omitted"
"""Header of a dead letter sent without its value: why, and how many bytes were left out."""

_KEY_LIMIT = 1024

Letter = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]
Where = tuple[str, int, int]
"""A record's coordinates: topic, partition, offset."""
Poison = tuple[Message, BaseException]


class DeadLetters:
    """Sends poison records to the DLQ topic and waits until they are durable."""

    def __init__(self, settings: Settings, consumer: str, producer: DurableProducer | None = None) -> None:
        self.topic = DLQ.name(settings.namespace)
        self.consumer = consumer
        self._producer = producer or DurableProducer(settings)
        self._sent: list[tuple[Delivery, Letter]] = []

    def send(self, msg: Message, error: BaseException) -> None:
        """Enqueue one poison record, keeping its key and value bytes."""
        topic, partition, offset = coordinates(msg)
        headers = error_headers(self.consumer, topic, partition, offset, error)
        logger.error(
            "poison record %s[%s]@%s -> DLQ: %s: %s", topic, partition, offset, type(error).__name__, error
        )
        letter: Letter = (msg.key(), msg.value(), headers)
        try:
            delivery = self._producer.produce_raw(self.topic, *letter)
        except PublishError as exc:
            if not _too_large(exc.__cause__):
                raise
            letter = _without_value(letter, str(exc.__cause__))
            delivery = self._producer.produce_raw(self.topic, *letter)
        self._sent.append((delivery, letter))

    def wait_durable(self) -> None:
        """Block until every enqueued record is acknowledged.

        Raises:
            PublishError: a record was not delivered in time (the caller must not commit, and
                sends its dead letters again).
        """
        sent, self._sent = self._sent, []
        try:
            self._producer.flush()
        except PublishError:
            self._producer.wait_durable([self._again(d, letter) for d, letter in sent])

    def _again(self, delivery: Delivery, letter: Letter) -> Delivery:
        """The delivery itself, or a copy without the value when the broker refused its size."""
        error = delivery.error
        if not delivery.done or error is None or not _too_large(error):
            return delivery
        return self._producer.produce_raw(self.topic, *_without_value(letter, error.str()))

    def close(self) -> None:
        """Flush what is pending; a record that does not make it is sent again after a restart."""
        try:
            self._producer.close()
        except PublishError as exc:
            # Its batch never committed (`wait_durable` comes first), so the record is re-read.
            logger.warning("closing with dead letters not acknowledged (re-sent on restart): %s", exc)


class BatchLetters:
    """One batch's dead letters, each record once by its coordinates, for the DLQ writes that
    must be durable before the store transaction storing the batch's offsets commits.

    A batch's transaction may be tried several times (the store failed, a refused record was
    found): a record refused again is not dead-lettered again, and after a try whose DLQ writes
    failed every letter of the batch is sent again (the DLQ is at-least-once: the
    `convdb.original.*` headers identify the copies).
    """

    def __init__(self, dead: DeadLetters, raw: Mapping[Where, Message], poison: Iterable[Poison]) -> None:
        self._dead = dead
        self._raw = raw
        self._letters: dict[Where, Poison] = {}
        for msg, error in poison:
            self._letters.setdefault(coordinates(msg), (msg, error))
        self._unsent: list[Where] = list(self._letters)

    def __len__(self) -> int:
        return len(self._letters)

    def add(self, where: Where, error: BaseException) -> None:
        """Dead-letter the batch's record at `where` with `error` (sent by the next `send` or
        `wait_durable`), unless it already is."""
        if where not in self._letters:
            self._letters[where] = (self._raw[where], error)
            self._unsent.append(where)

    def send(self) -> None:
        """Send the letters not sent yet (every one again once a send or a wait has failed).

        Raises:
            PublishError: the DLQ's producer refused a letter.
        """
        try:
            for where in self._unsent:
                self._dead.send(*self._letters[where])
        except PublishError:
            self._unsent = list(self._letters)
            raise
        self._unsent = []

    def wait_durable(self) -> None:
        """Send the letters not sent yet, and block until every one sent is acknowledged.

        Raises:
            PublishError: a letter was not made durable (the caller must not commit).
        """
        self.send()
        try:
            self._dead.wait_durable()
        except PublishError:
            self._unsent = list(self._letters)
            raise


def _too_large(error: object) -> bool:
    if isinstance(error, KafkaException):
        error = error.args[0] if error.args else None
    return isinstance(error, KafkaError) and error.code() in (
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
    )


def _without_value(letter: Letter, why: str) -> Letter:
    key, value, headers = letter
    size = len(key or b"") + len(value or b"")
    note = f"{size} bytes of key and value left out ({why}); the original is at convdb.original.*"
    logger.warning("dead letter too large for the DLQ, sent without its value: %s", note)
    short_key = key if key is None or len(key) <= _KEY_LIMIT else key[:_KEY_LIMIT]
    return short_key, None, [*headers, (OMITTED, note.encode())]
