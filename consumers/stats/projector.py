"""The stats consumer: `projections.stats` per conversation, one row each (DESIGN §8)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from consumers._rows import by_conversation, events_only, fold_batch, from_micros, micros
from consumers.base import ConsumedRecord
from consumers.errors import RecordsRejectedError
from consumers.store import upsert
from infra.settings import Settings
from projections import stats
from schemas.topics import EVENTS

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
    sa.Column("execution_status", sa.String(40)),
    sa.Column("first_us", sa.BigInteger),
    sa.Column("last_us", sa.BigInteger),
    sa.Column("duration_s", sa.Float, nullable=False),
    sa.Column("annotations", sa.Text, nullable=False, doc="JSON: ids of the seq-0 events counted."),
    sa.Index("stats_conversations_tenant", "tenant_id", "last_us", "conversation_id"),
)
"""One row per conversation: its statistics."""

_NUMBERS = (
    "last_seq",
    "llm_calls",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cost",
    "unpriced_calls",
    "llm_latency_ms",
    "tool_calls",
    "errors",
)
CHUNK = 500


class StatsConsumer:
    """Projector `stats`: counts, tokens, cost, tool calls, errors, status and times per conversation."""

    name = "stats"
    topics = (EVENTS,)
    version = 1

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings

    def create(self, connection: Connection) -> None:
        """Create the stats table (idempotent)."""
        metadata.create_all(connection)

    def drop(self, connection: Connection) -> None:
        """Drop the stats table."""
        metadata.drop_all(connection)

    def apply(self, connection: Connection, records: Sequence[ConsumedRecord]) -> None:
        """Fold the batch into each touched conversation's row."""
        groups = by_conversation(events_only(records))
        if not groups:
            return
        states = load_states(connection, list(groups))
        rejected: list[tuple[ConsumedRecord, BaseException]] = []
        rows = []
        for conv, group in groups.items():
            before = states.get(conv) or stats.initial(conv)
            after, _ = fold_batch(stats.fold_all, stats.fold, before, group, rejected)
            if after is not before:
                rows.append(to_row(after))
        if rejected:
            raise RecordsRejectedError(rejected)
        upsert(connection, conversations, rows, ["conversation_id"])

    def digests(self, connection: Connection) -> dict[str, str]:
        """Per-conversation digest of the statistics row."""
        import hashlib

        out = {}
        for row in connection.execute(sa.select(conversations)).mappings():
            text = json.dumps(dict(row), sort_keys=True, default=str)
            out[row["conversation_id"]] = hashlib.sha256(text.encode()).hexdigest()
        return out


def to_row(state: stats.ConversationStats) -> dict[str, Any]:
    """The table row of a conversation's statistics."""
    row: dict[str, Any] = {name: getattr(state, name) for name in _NUMBERS}
    row.update(
        conversation_id=state.conversation_id,
        tenant_id=state.tenant_id or "",
        event_count=state.events,
        counts=json.dumps(state.counts_by_kind, sort_keys=True),
        execution_status=state.execution_status,
        first_us=None if state.first_timestamp is None else micros(state.first_timestamp),
        last_us=None if state.last_timestamp is None else micros(state.last_timestamp),
        duration_s=state.duration_s,
        annotations=json.dumps(sorted(state.annotations)),
    )
    return row


def from_row(row: Any) -> stats.ConversationStats:
    """The statistics state a table row holds (inverse of `to_row`)."""
    counts = json.loads(row["counts"])
    return stats.ConversationStats(
        conversation_id=row["conversation_id"],
        tenant_id=row["tenant_id"] or None,
        events=row["event_count"],
        counts=tuple(counts.get(kind, 0) for kind in stats.EVENT_KINDS),
        execution_status=row["execution_status"],
        first_timestamp=None if row["first_us"] is None else from_micros(row["first_us"]),
        last_timestamp=None if row["last_us"] is None else from_micros(row["last_us"]),
        annotations=frozenset(json.loads(row["annotations"])),
        **{name: row[name] for name in _NUMBERS},
    )


def load_states(connection: Connection, convs: list[str]) -> dict[str, stats.ConversationStats]:
    """Stored statistics of these conversations (missing ones are absent)."""
    found = {}
    for start in range(0, len(convs), CHUNK):
        query = sa.select(conversations).where(
            conversations.c.conversation_id.in_(convs[start : start + CHUNK])
        )
        for row in connection.execute(query).mappings():
            found[row["conversation_id"]] = from_row(row)
    return found
