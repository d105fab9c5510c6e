"""The event index table and the composite indexes that make keyset search O(log N + page).

Every search orders by the keyset of `convdb.projections.index` — (timestamp, conversation_id, seq,
event_id), unique, so a cursor is a total position —
and each supported filter has an index whose columns are the equality filters followed by that
order, so a page is one index range scan that stops after `limit` rows. The unique
(tenant, conversation, time, id) index also deduplicates a re-delivered event. A row's key is
its record's log position (`doc`, `convdb.consumers.store.log_position`): on SQLite the rowid
itself, appended in log order within a partition (no extra tree; a random event-id key was
measured 35% slower to insert into), on PostgreSQL a bigint key given by the writer (a serial
one cost 20% of the inserts). The payload is the store's one copy in `event_payloads`, found by
partition and offset when a page is read; the display text is derived from it then (50 rows),
not stored for every event. Each of the four indexes serves a search shape of the API or the
console (kind: the console's forks and usage; source; time: a tenant's whole history, or a time
range), and a search with both a kind and a source uses the kind's.

Full-text search (index v9) is in the same rows: each event's distinct words
(`convdb.projections.index.search_body`) are indexed by the store's own word index, keyed by the
row's `doc`: on SQLite a contentless FTS5 table (`FTS`, its rowid the row's `doc`; the words are
not stored twice), on PostgreSQL a GIN index on `to_tsvector('simple', body)`. Index v8 kept a
second table of every event (`index_text`, with its own unique key, filled by a per-row trigger):
measured 45 us per event on SQLite and 27 on PostgreSQL, now 4-6 us on SQLite.
"""

from __future__ import annotations

import sqlalchemy as sa

from convdb.consumers._chains import chain_table

metadata = sa.MetaData()

events = sa.Table(
    "index_events",
    metadata,
    sa.Column(
        "doc",
        sa.BigInteger().with_variant(sa.Integer, "sqlite"),  # INTEGER: SQLite's rowid itself
        primary_key=True,
        autoincrement=False,
        doc="The record's log position (`log_position(partition, offset)`): the row's key, and the "
        "full-text index's.",
    ),
    sa.Column("tenant_id", sa.String(200), nullable=False),
    sa.Column("conversation_id", sa.String(200), nullable=False),
    sa.Column("timestamp_us", sa.BigInteger, nullable=False),
    sa.Column("event_id", sa.String(200), nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("source", sa.String(20), nullable=False),
    sa.Column("parent_id", sa.String(200)),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("offset", sa.BigInteger, nullable=False, doc="With `partition`: where its payload is stored."),
    sa.Column(
        "body",
        sa.Text,
        doc="PostgreSQL: `convdb.projections.index.search_body` (words only; NULL: none). SQLite: NULL "
        "(the FTS5 table holds the words).",
    ),
    sa.Index(
        "index_events_conv", "tenant_id", "conversation_id", "timestamp_us", "seq", "event_id", unique=True
    ),
    sa.Index("index_events_kind", "tenant_id", "kind", "timestamp_us", "conversation_id", "seq", "event_id"),
    sa.Index(
        "index_events_source", "tenant_id", "source", "timestamp_us", "conversation_id", "seq", "event_id"
    ),
    sa.Index("index_events_time", "tenant_id", "timestamp_us", "conversation_id", "seq", "event_id"),
)
"""Every event, once, with the columns search filters on."""

FTS = "index_events_fts"
"""SQLite's contentless FTS5 table of the events' words, its rowid the row's `doc`: given the words of
the rows a batch inserted (`SQLITE_INDEX_WORDS`). Index v8 fed it by a per-row trigger, which cost
35 us per row (the FTS5 table flushed its pending words at every trigger's statement)."""

SQLITE_INDEX_WORDS = f"INSERT INTO {FTS}(rowid, body) VALUES (?, ?)"
"""One row's words for the FTS5 table (its `doc`, its `search_body`)."""

TSVECTOR = "to_tsvector('simple'::regconfig, index_events.body)"
"""PostgreSQL's indexed expression; a query must spell it the same to use the index."""

sa.event.listen(
    events,
    "after_create",
    sa.DDL(
        f"CREATE VIRTUAL TABLE {FTS} USING fts5(body, content='', tokenize='unicode61 remove_diacritics 0')"
    ).execute_if(dialect="sqlite"),
)
sa.event.listen(events, "before_drop", sa.DDL(f"DROP TABLE IF EXISTS {FTS}").execute_if(dialect="sqlite"))
sa.event.listen(
    events,
    "after_create",
    sa.DDL(f"CREATE INDEX index_events_words ON index_events USING gin ({TSVECTOR})").execute_if(
        dialect="postgresql"
    ),
)

conversations = chain_table("index_conversations", metadata)
"""Per conversation, its chain as the log decided it (`convdb.projections.chain`): what the index admits."""

KEY = ("tenant_id", "conversation_id", "timestamp_us", "seq", "event_id")
"""The unique key: a re-delivered event is skipped on it."""

COLUMNS = (
    "event_id",
    "tenant_id",
    "conversation_id",
    "seq",
    "kind",
    "source",
    "parent_id",
    "timestamp_us",
    "partition",
    "offset",
    "doc",
    "body",
)
"""Column order of the positional rows the projector writes (`row_of`)."""
