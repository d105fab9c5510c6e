"""Tables of the views projection: the event log per conversation and a row per conversation.

The active branch is stored as runs of log positions (`convdb.consumers.views.segments`), so a
tail append rewrites one small row. The row is also the view's tip
(`convdb.projections.view_tip`), which is all a run of tail appends needs. The log's rows refer to
their events' payloads in the store's `event_payloads` by partition and offset (the index refers to
the same ones). Readers outside this package go through `convdb.consumers.views.queries`.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

conversations = sa.Table(
    "views_conversations",
    metadata,
    sa.Column("conversation_id", sa.String(200), primary_key=True),
    sa.Column("tenant_id", sa.String(200), nullable=False),
    sa.Column("last_seq", sa.BigInteger, nullable=False),
    sa.Column("event_count", sa.BigInteger, nullable=False, doc="Events folded (the log's length)."),
    sa.Column("active_leaf", sa.String(200)),
    sa.Column("branch_length", sa.BigInteger, nullable=False),
    sa.Column("branch", sa.Text, nullable=False, doc="Active branch as JSON [[first, last], ...] positions."),
    sa.Column("updated_us", sa.BigInteger, nullable=False, doc="Timestamp of the last event folded."),
    sa.Index("views_conversations_tenant", "tenant_id", "conversation_id"),
)
"""One row per conversation: where its view stands."""

events = sa.Table(
    "views_events",
    metadata,
    sa.Column("conversation_id", sa.String(200), primary_key=True),
    sa.Column("position", sa.BigInteger, primary_key=True, autoincrement=False, doc="Fold order."),
    sa.Column("event_id", sa.String(200), nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("timestamp_us", sa.BigInteger, nullable=False),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("offset", sa.BigInteger, nullable=False, doc="With `partition`: where its payload is stored."),
)
"""Every event folded into a conversation's view, in fold order (rebuilds the state; 'as of T')."""

EVENT_COLUMNS = (
    "conversation_id",
    "position",
    "event_id",
    "seq",
    "timestamp_us",
    "partition",
    "offset",
)
"""Column order of the positional rows the projector bulk-inserts."""
