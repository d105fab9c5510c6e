"""The index consumer: every event as one row, for keyset-paginated search (DESIGN §8)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from consumers._rows import event_json, events_only, micros
from consumers.base import ConsumedRecord
from consumers.index.tables import KEY, events, metadata
from consumers.store import bulk_insert
from infra.settings import Settings
from projections._text import shorten
from projections.index import TEXT_LIMIT, describe
from schemas.topics import EVENTS


class IndexConsumer:
    """Projector `index`: one row per event id; a re-delivered event id is ignored."""

    name = "index"
    topics = (EVENTS,)
    version = 3

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings

    def create(self, connection: Connection) -> None:
        """Create the index table and its search indexes (idempotent)."""
        metadata.create_all(connection)

    def drop(self, connection: Connection) -> None:
        """Drop the index table."""
        metadata.drop_all(connection)

    def apply(self, connection: Connection, records: Sequence[ConsumedRecord]) -> None:
        """Insert one row per new event id."""
        rows = [row_of(r) for r in events_only(records)]
        bulk_insert(connection, events, COLUMNS, rows, ignore_conflicts_on=KEY)

    def digests(self, connection: Connection) -> dict[str, str]:
        """Per-conversation digest: sha256 over the conversation's event ids in (seq, id) order."""
        import hashlib

        query = sa.select(events.c.conversation_id, events.c.event_id).order_by(
            events.c.conversation_id, events.c.seq, events.c.event_id
        )
        hashes: dict[str, Any] = {}
        for conv, event_id in connection.execute(query):
            hashes.setdefault(conv, hashlib.sha256()).update(event_id.encode() + b"\n")
        return {conv: h.hexdigest() for conv, h in hashes.items()}


COLUMNS = (
    "event_id",
    "tenant_id",
    "conversation_id",
    "seq",
    "kind",
    "source",
    "parent_id",
    "text",
    "timestamp_us",
    "partition",
    "offset",
    "payload",
)
"""Column order of `row_of`."""


def row_of(record: ConsumedRecord) -> tuple[Any, ...]:
    """The row of one event record, in `COLUMNS` order.

    The columns are those of `projections.index.index_row`; the payload is the memoized JSON
    text instead of `index_row`'s dict, which the views projector has already serialized.
    """
    e: Any = record.value
    return (
        e.id,
        e.tenant_id,
        e.conversation_id,
        e.seq,
        e.kind,
        e.source,
        e.parent_id,
        shorten(describe(e), TEXT_LIMIT),
        micros(e.timestamp),
        record.partition,
        record.offset,
        event_json(e),
    )
