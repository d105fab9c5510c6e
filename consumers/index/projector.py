"""The index consumer: every event as one row, for keyset-paginated search (DESIGN §8).

Each event is first folded into its conversation's `convdb.projections.chain` (a small row per
conversation): an event of another tenant, after a gap, or at a seq the log already gave to
another event is refused (to the DLQ) as by every other projection, and a redelivery is skipped.
Whether an event at an earlier seq is a redelivery is told from the ids stored at that seq.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convdb.consumers._chains import Chains
from convdb.consumers._rows import micros
from convdb.consumers.base import Batch, ConsumedRecord, DigestOf, Rejection, TableProjector
from convdb.consumers.index.tables import (
    COLUMNS,
    KEY,
    SQLITE_INDEX_WORDS,
    conversations,
    events,
    metadata,
)
from convdb.consumers.store import bulk_insert, log_position, sqlite_insert_returning
from convdb.projections import chain
from convdb.projections._sequence import ANNOTATION_SEQ
from convdb.projections.errors import ProjectionError
from convdb.projections.index import search_body


class IndexConsumer(TableProjector):
    """Projector `index`: one row per event the chain admits; a re-delivered event id is skipped."""

    name = "index"
    version = 9
    metadata = metadata
    digest_of = (DigestOf(events, ("event_id",), ("seq", "event_id")),)

    def apply(self, connection: Connection, batch: Sequence[ConsumedRecord]) -> Sequence[Rejection]:
        """Insert one row per admitted event; returns the refused ones."""
        batch = Batch.of(batch)
        groups = batch.by_conversation()
        if not groups:
            return []
        chains = Chains.load(connection, conversations, list(groups))
        rejected: list[Rejection] = []
        skipped: set[int] = set()
        for conv, group in groups.items():
            chains.advance(_admit(connection, chains.get(conv), group, skipped, rejected))
        # In log order: the time-ordered indexes take appends (grouped rows made the inserts 8% slower).
        kept = batch.events() if not skipped else [r for r in batch.events() if id(r) not in skipped]
        batch.store_payloads(connection, kept)
        _insert(connection, kept)
        chains.write(connection)
        return rejected

    def drop(self, connection: Connection) -> None:
        """Drop the index tables (and index v8's full-text table and its FTS5 table, if present)."""
        super().drop(connection)
        for legacy in ("index_text_fts", "index_text"):
            connection.execute(sa.text(f"DROP TABLE IF EXISTS {legacy}"))


def _insert(connection: Connection, records: Sequence[ConsumedRecord]) -> None:
    """Insert a row per record (a re-delivered one is skipped) with its words: in the row on
    PostgreSQL (its GIN index reads them there), in the FTS5 table on SQLite, for the rows
    inserted only (the insert returns their `doc`)."""
    if not records:
        return
    bodies = [search_body(r.value) for r in records]  # type: ignore[arg-type]  # events only
    if connection.dialect.name != "sqlite":
        rows = [row_of(r, body) for r, body in zip(records, bodies, strict=True)]
        bulk_insert(connection, events, COLUMNS, rows, ignore_conflicts_on=KEY)
        return
    rows = [row_of(r) for r in records]
    inserted = sqlite_insert_returning(connection, events, COLUMNS, rows, KEY, "doc")
    new = None if len(inserted) == len(rows) else set(inserted)  # None: all, the usual case
    words = [
        (row[-2], body)
        for row, body in zip(rows, bodies, strict=True)
        if body and (new is None or row[-2] in new)
    ]
    if words:
        connection.exec_driver_sql(SQLITE_INDEX_WORDS, words)


def _admit(
    connection: Connection,
    state: chain.Chain,
    group: list[ConsumedRecord],
    skipped: set[int],
    rejected: list[Rejection],
) -> chain.Chain:
    """Fold a conversation's records into its chain; the `id()` of those it does not admit go to
    `skipped` (the refused ones to `rejected` too)."""
    conv, tenant, last_seq, last_id = state
    for record in group:  # the common case first: every record the next one, of the owner's tenant
        event: Any = record.value
        if event.seq != last_seq + 1 or event.tenant_id != tenant:
            break
        last_seq = event.seq
    else:
        return chain.Chain(conv, tenant, last_seq, group[-1].value.id)  # type: ignore[attr-defined]
    conv, tenant, last_seq, last_id = state
    folded: list[str] = []
    stored: set[str] | None = None
    repeated = _repeated_annotations(connection, conv, group)
    for record in group:
        event = record.value
        if event.seq == last_seq + 1 and event.tenant_id == tenant:
            last_seq, last_id = event.seq, event.id
        else:
            known = None
            if 0 < event.seq <= last_seq:  # a redelivery or a conflict: which ids hold these seqs?
                if stored is None:
                    stored = _stored_ids(connection, state, [r.value.seq for r in group])  # type: ignore[attr-defined]
                known = stored.union(folded)
            try:
                after = chain.fold(chain.Chain(conv, tenant, last_seq, last_id), event, known)
            except ProjectionError as exc:
                rejected.append(Rejection(record, exc))
                skipped.add(id(record))
                continue
            if after is None or id(record) in repeated:
                skipped.add(id(record))
                continue
            conv, tenant, last_seq, last_id = after
        folded.append(event.id)
    return chain.Chain(conv, tenant, last_seq, last_id)


def _repeated_annotations(connection: Connection, conv: str, group: list[ConsumedRecord]) -> set[int]:
    """`id()` of the group's annotations (seq 0) that the index holds already, or that an earlier record
    of the group repeats: rows its unique key would skip, left out before their payloads are stored."""
    annotations = [r for r in group if r.value.seq == ANNOTATION_SEQ]  # type: ignore[attr-defined]
    if not annotations:
        return set()
    keys = [(r.value.tenant_id, micros(r.value.timestamp), r.value.id) for r in annotations]  # type: ignore[attr-defined]
    c = events.c
    query = sa.select(c.tenant_id, c.timestamp_us, c.event_id).where(
        c.conversation_id == conv,
        c.seq == ANNOTATION_SEQ,
        c.tenant_id.in_({t for t, _, _ in keys}),
        c.timestamp_us.in_({us for _, us, _ in keys}),
        c.event_id.in_({i for _, _, i in keys}),
    )
    seen = {(t, us, i) for t, us, i in connection.execute(query)}
    repeated = set()
    for record, key in zip(annotations, keys, strict=True):
        if key in seen:
            repeated.add(id(record))
        seen.add(key)
    return repeated


def _stored_ids(connection: Connection, state: chain.Chain, seqs: list[int]) -> set[str]:
    """Ids the index holds for a conversation at some seqs (a redelivery or a conflict to tell)."""
    wanted = sorted({s for s in seqs if 0 < s <= state.last_seq})
    if state.tenant_id is None or not wanted:
        return set()
    c = events.c
    query = sa.select(c.event_id).where(
        c.tenant_id == state.tenant_id, c.conversation_id == state.conversation_id, c.seq.in_(wanted)
    )
    return set(connection.execute(query).scalars())


def row_of(record: ConsumedRecord, body: str | None = None) -> tuple[Any, ...]:
    """The row of one event record, in `COLUMNS` order, with its words (`body`; '' is none: NULL).

    The columns are those of `convdb.projections.index.index_row` but its text and payload: the
    payload is the store's copy (`Batch.store_payloads`), from which a search derives the text.
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
        log_position(record.partition, record.offset),
        body or None,
    )
