"""The index consumer: every event as one row, for keyset-paginated search (DESIGN §8)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from consumers._rows import micros
from consumers.base import Batch, ConsumedRecord, DigestOf, Rejection, TableProjector
from consumers.index.tables import COLUMNS, KEY, events, metadata
from consumers.store import bulk_insert


class IndexConsumer(TableProjector):
    """Projector `index`: one row per event id; a re-delivered event id is ignored."""

    name = "index"
    version = 5
    metadata = metadata
    digest_of = (DigestOf(events, ("event_id",), ("seq", "event_id")),)

    def apply(self, connection: Connection, batch: Sequence[ConsumedRecord]) -> Sequence[Rejection]:
        """Insert one row per new event id (the index refuses nothing)."""
        batch = Batch.of(batch)
        rows = [row_of(r, batch) for r in batch.events()]
        bulk_insert(connection, events, COLUMNS, rows, ignore_conflicts_on=KEY)
        return []


def row_of(record: ConsumedRecord, batch: Batch) -> tuple[Any, ...]:
    """The row of one event record, in `COLUMNS` order.

    The columns are those of `projections.index.index_row` but its text, which a search
    derives from the payload; the payload is the record's Avro bytes, as they arrived.
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
        micros(e.timestamp),
        record.partition,
        record.offset,
        batch.payload(record),
    )
