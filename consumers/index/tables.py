"""The event index table and the composite indexes that make keyset search O(log N + page).

Every search orders by the keyset of `convdb.projections.index` — (timestamp, conversation_id, seq,
event_id), unique, so a cursor is a total position —
and each supported filter has an index whose columns are the equality filters followed by that
order, so a page is one index range scan that stops after `limit` rows. The unique
(tenant, conversation, time, id) index also deduplicates a re-delivered event. The table has
no declared primary key: SQLite keys rows by its implicit rowid (a random event-id key was
measured 35% slower to insert into) and PostgreSQL needs none (a serial one cost 20% of the
inserts). The payload is the store's one copy in `event_payloads`, found by partition and
offset when a page is read; the display text is derived from it then (50 rows), not stored for
every event. Each of the four indexes serves a search shape of the API or the console (kind:
the console's forks and usage; source; time: a tenant's whole history, or a time range), and a
search with both a kind and a source uses the kind's.
"""

from __future__ import annotations

import sqlalchemy as sa

from convdb.consumers._chains import chain_table

metadata = sa.MetaData()

events = sa.Table(
    "index_events",
    metadata,
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

text = sa.Table(
    "index_text",
    metadata,
    sa.Column("doc", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("tenant_id", sa.String(200), nullable=False),
    sa.Column("conversation_id", sa.String(200), nullable=False),
    sa.Column("timestamp_us", sa.BigInteger, nullable=False),
    sa.Column("event_id", sa.String(200), nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("source", sa.String(20), nullable=False),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("offset", sa.BigInteger, nullable=False, doc="With `partition`: where its payload is stored."),
    sa.Column("body", sa.Text, nullable=False, doc="`convdb.projections.index.search_body`: words only."),
    sa.Index(
        "index_text_key", "tenant_id", "conversation_id", "timestamp_us", "seq", "event_id", unique=True
    ),
)
"""Full-text search: the words of each event that has some, with the keyset and filter columns.

The word index is the store's own: on SQLite an FTS5 table over `body` (external content, kept by
a trigger), on PostgreSQL a GIN index on `to_tsvector('simple', body)`. Both are given words only
(lower-cased, split by `convdb.projections.index.terms`) and fold nothing further (no stemming, no
accent folding), so the two stores find the same events for a query."""

FTS = "index_text_fts"
"""SQLite's FTS5 table over `index_text.body` (rowid = `doc`), given a batch's new rows by one
INSERT ... SELECT (`SQLITE_INDEX_WORDS`). A per-row trigger did it in index v8 and cost 35 us per
row (the FTS5 table flushed its pending words at every trigger's statement), a third of the sink's time."""

SQLITE_INDEX_WORDS = f"INSERT INTO {FTS}(rowid, body) SELECT doc, body FROM index_text WHERE doc > ?"
"""The words of the rows added after the `doc` given (the largest before the batch's insert)."""
TSVECTOR = "to_tsvector('simple'::regconfig, index_text.body)"
"""PostgreSQL's indexed expression; a query must spell it the same to use the index."""

sa.event.listen(
    text,
    "after_create",
    sa.DDL(
        f"CREATE VIRTUAL TABLE {FTS} USING fts5(body, content='index_text', content_rowid='doc', "
        "tokenize='unicode61 remove_diacritics 0')"
    ).execute_if(dialect="sqlite"),
)
sa.event.listen(text, "before_drop", sa.DDL(f"DROP TABLE IF EXISTS {FTS}").execute_if(dialect="sqlite"))
sa.event.listen(
    text,
    "after_create",
    sa.DDL(f"CREATE INDEX index_text_words ON index_text USING gin ({TSVECTOR})").execute_if(
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
)
"""Column order of the positional rows the projector writes (`row_of`)."""

TEXT_COLUMNS = (
    "tenant_id",
    "conversation_id",
    "timestamp_us",
    "event_id",
    "seq",
    "kind",
    "source",
    "partition",
    "offset",
    "body",
)
"""Column order of the positional rows of `text` (`text_row_of`)."""
