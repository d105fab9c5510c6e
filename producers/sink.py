"""Where a conversation's records go: a port, so a partition's transactional writer (the fleet) or an
idempotent producer (`DurableSink`, for conversations no runner owns) can be plugged in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from convdb.infra.producer import Delivery
from convdb.producers.publisher import EventPublisher
from convdb.schemas import AvroModel, EventEnvelope, InboxMessage, LedgerRecord, Snapshot
from convdb.schemas.graph import GraphCheckpoint, GraphDeleted, GraphWrites
from convdb.schemas.topics import EFFECTS, EVENTS, GRAPH, INBOX, STATE, Topic


class RecordSink(Protocol):
    """Writes a group of records and returns only once they are durable."""

    def write(self, records: Sequence[tuple[Topic[Any], AvroModel]]) -> list[Delivery]:
        """Make every record durable (acks=all); raise `PublishError` otherwise."""
        ...


class DurableSink:
    """An idempotent producer: records are durable, each on its own (not atomically)."""

    def __init__(self, publisher: EventPublisher) -> None:
        self.publisher = publisher

    def write(self, records: Sequence[tuple[Topic[Any], AvroModel]]) -> list[Delivery]:
        """Publish all, then wait for every acknowledgement."""
        return self.publisher.wait_durable([self.publisher.publish(r, t) for t, r in records])


def topic_of(record: AvroModel) -> Topic[Any]:
    """The topic a conversation record belongs on."""
    if isinstance(record, EventEnvelope):
        return EVENTS
    if isinstance(record, LedgerRecord):
        return EFFECTS
    if isinstance(record, Snapshot):
        return STATE
    if isinstance(record, InboxMessage):
        return INBOX  # a delegation's record for another conversation (a child's first, a report)
    if isinstance(record, GraphCheckpoint | GraphWrites | GraphDeleted):
        return GRAPH  # a hosted LangGraph thread's checkpoints (`producers.graph_host`)
    raise TypeError(f"a conversation does not write {type(record).__name__}")
