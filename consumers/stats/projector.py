"""The stats consumer: `convdb.projections.stats` per conversation, one row each (DESIGN §8)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convdb.consumers._rows import from_micros, micros
from convdb.consumers.base import Change, ConversationProjector, DigestOf, Fold, load_rows
from convdb.projections import stats
from convdb.schemas.events import EVENT_KINDS

metadata = sa.MetaData()

conversations = sa.Table(
    "stats_conversations",
    metadata,
    sa.Column("conversation_id", sa.String(200), primary_key=True),
    sa.Column("tenant_id", sa.String(200), nullable=False),
    sa.Column("last_seq", sa.BigInteger, nullable=False),
    sa.Column("event_count", sa.BigInteger, nullable=False),
    sa.Column("counts", sa.Text, nullable=False, doc="JSON: events by kind."),
    sa.Column("llm_calls", sa.BigInteger, nullable=False),
    sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
    sa.Column("completion_tokens", sa.BigInteger, nullable=False),
    sa.Column("cached_tokens", sa.BigInteger, nullable=False),
    sa.Column("cost", sa.Float, nullable=False),
    sa.Column("unpriced_calls", sa.BigInteger, nullable=False),
    sa.Column("llm_latency_ms", sa.Float, nullable=False),
    sa.Column("tool_calls", sa.BigInteger, nullable=False),
    sa.Column("errors", sa.BigInteger, nullable=False),
    sa.Column(
        "execution_status",
        sa.String(40),
        doc="The status shown: the log's, or waiting_for_children while a running one waits for children.",
    ),
    sa.Column("first_us", sa.BigInteger),
    sa.Column("last_us", sa.BigInteger),
    sa.Column("duration_s", sa.Float, nullable=False),
    sa.Column("annotations", sa.Text, nullable=False, doc="JSON: ids of the seq-0 events counted."),
    sa.Column("last_id", sa.String(200), doc="Id of the event at last_seq (tells a conflict)."),
    sa.Column("parent_conversation_id", sa.String(200), doc="The parent of a delegated child; null: a root."),
    sa.Column("parent_operation_id", sa.String(600), doc="The parent's operation that started the child."),
    sa.Column("delegation_depth", sa.Integer, nullable=False, doc="Depth in the task tree (0: a root)."),
    sa.Column("delegations", sa.Text, nullable=False, doc="JSON: ids of its delegation calls still waiting."),
    sa.Index("stats_conversations_tenant", "tenant_id", "last_us", "conversation_id"),
    sa.Index("stats_conversations_parent", "tenant_id", "parent_conversation_id"),
)
"""One row per conversation: its statistics."""

_NUMBERS = ("last_seq", "tool_calls", "errors")
"""Columns that hold a figure of the state as it is; the `Usage` figures have a column each too."""


class StatsConsumer(ConversationProjector[stats.ConversationStats]):
    """Projector `stats`: counts, tokens, cost, tool calls, errors, status and times per conversation."""

    name = "stats"
    version = 4
    metadata = metadata
    table = conversations
    digest_of = (DigestOf(conversations),)
    projection = Fold(stats.initial, stats.fold, stats.fold_all)

    def to_row(self, change: Change[stats.ConversationStats]) -> dict[str, Any]:
        """The table row of a conversation's statistics."""
        return to_row(change.after)

    def from_row(self, row: Mapping[str, Any]) -> stats.ConversationStats:
        """The statistics a row holds."""
        return from_row(row)


def to_row(state: stats.ConversationStats) -> dict[str, Any]:
    """The table row of a conversation's statistics."""
    row: dict[str, Any] = {name: getattr(state, name) for name in _NUMBERS}
    row.update(state.usage._asdict())
    row.update(
        conversation_id=state.conversation_id,
        tenant_id=state.tenant_id or "",
        event_count=state.events,
        counts=json.dumps(state.counts_by_kind, sort_keys=True),
        execution_status=state.shown_status,
        first_us=None if state.first_timestamp is None else micros(state.first_timestamp),
        last_us=None if state.last_timestamp is None else micros(state.last_timestamp),
        duration_s=state.duration_s,
        annotations=json.dumps(sorted(state.annotations)),
        last_id=state.last_id,
        parent_conversation_id=state.parent.conversation_id if state.parent else None,
        parent_operation_id=state.parent.operation_id if state.parent else None,
        delegation_depth=state.parent.depth if state.parent else 0,
        delegations=json.dumps(sorted(state.delegations)),
    )
    return row


def from_row(row: Mapping[str, Any]) -> stats.ConversationStats:
    """The statistics state a table row holds (inverse of `to_row`)."""
    counts = json.loads(row["counts"])
    return stats.ConversationStats(
        conversation_id=row["conversation_id"],
        tenant_id=row["tenant_id"] or None,
        events=row["event_count"],
        counts=tuple(counts.get(kind, 0) for kind in EVENT_KINDS),
        execution_status=_log_status(row["execution_status"]),
        first_timestamp=None if row["first_us"] is None else from_micros(row["first_us"]),
        last_timestamp=None if row["last_us"] is None else from_micros(row["last_us"]),
        annotations=frozenset(json.loads(row["annotations"])),
        last_id=row["last_id"],
        parent=stats.Parent(
            row["parent_conversation_id"], row["parent_operation_id"], row["delegation_depth"]
        )
        if row["parent_conversation_id"]
        else None,
        delegations=frozenset(json.loads(row["delegations"])),
        usage=stats.Usage(*(row[name] for name in stats.Usage._fields)),
        **{name: row[name] for name in _NUMBERS},
    )


def _log_status(shown: str | None) -> Any:
    """The log's status behind a shown one (a conversation waiting for children is running)."""
    return "running" if shown == stats.WAITING_FOR_CHILDREN else shown


def load_states(connection: Connection, convs: list[str]) -> dict[str, stats.ConversationStats]:
    """Stored statistics of these conversations (missing ones are absent)."""
    return {conv: from_row(row) for conv, row in load_rows(connection, conversations, convs).items()}
