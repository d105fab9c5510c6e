"""Where a conversation's records go: a small port so a transactional writer can be swapped in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from producers.publisher import Delivery, EventPublisher, TransactionalPublisher
from schemas import AvroModel
from schemas.topics import Topic


class RecordSink(Protocol):
    """Writes a group of records and returns only once they are durable."""

    def write(self, records: Sequence[tuple[Topic, AvroModel]]) -> list[Delivery]:
        """Make every record durable (acks=all); raise `PublishError` otherwise."""
        ...


class DurableSink:
    """An idempotent producer: records are durable, each on its own (not atomically)."""

    def __init__(self, publisher: EventPublisher) -> None:
        self.publisher = publisher

    def write(self, records: Sequence[tuple[Topic, AvroModel]]) -> list[Delivery]:
        """Publish all, then wait for every acknowledgement."""
        return self.publisher.wait_durable([self.publisher.publish(r, t) for t, r in records])


class AtomicSink:
    """A transactional producer: a group of records is committed all-or-nothing."""

    def __init__(self, publisher: TransactionalPublisher) -> None:
        self.publisher = publisher

    def write(self, records: Sequence[tuple[Topic, AvroModel]]) -> list[Delivery]:
        """One transaction per group (offsets are unknown: no deliveries are returned)."""
        self.publisher.publish_atomic(list(records))
        return []
