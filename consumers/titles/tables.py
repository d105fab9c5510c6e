"""The titles consumer's table: one title processor per conversation, and its row codec."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convdb.consumers.base import load_rows
from convdb.projections import titles

metadata = sa.MetaData()

processors = sa.Table(
    "titles_conversations",
    metadata,
    sa.Column("conversation_id", sa.String(200), primary_key=True),
    sa.Column("tenant_id", sa.String(200), nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("title", sa.Text, doc="Any length a TitleEvent holds (PostgreSQL enforces VARCHAR)."),
    sa.Column("origin", sa.String(20)),
    sa.Column("first_user_message", sa.Text),
    sa.Column("last_seq", sa.BigInteger, nullable=False),
    sa.Column("annotations", sa.Text, nullable=False, doc="JSON: ids of the TitleEvents folded."),
    sa.Column("partition", sa.Integer, nullable=False, doc="Events partition of the conversation."),
    sa.Column("last_id", sa.String(200), doc="Id of the event at last_seq (tells a conflict)."),
)
"""One title processor per conversation."""


def to_row(state: titles.TitleProcessor, tenant_id: str, partition: int) -> dict[str, Any]:
    """The table row of a processor."""
    return {
        "conversation_id": state.conversation_id,
        "tenant_id": tenant_id,
        "status": state.status,
        "attempts": state.attempts,
        "title": state.title,
        "origin": state.origin,
        "first_user_message": state.first_user_message,
        "last_seq": state.last_seq,
        "annotations": json.dumps(sorted(state.annotations)),
        "partition": partition,
        "last_id": state.last_id,
    }


def from_row(row: Mapping[str, Any]) -> titles.TitleProcessor:
    """The processor a row holds (inverse of `to_row`)."""
    return titles.TitleProcessor(
        conversation_id=row["conversation_id"],
        status=row["status"],
        attempts=row["attempts"],
        title=row["title"],
        origin=row["origin"],
        first_user_message=row["first_user_message"],
        last_seq=row["last_seq"],
        annotations=frozenset(json.loads(row["annotations"])),
        tenant_id=row["tenant_id"] or None,
        last_id=row["last_id"],
    )


def load_states(connection: Connection, convs: list[str]) -> dict[str, tuple[str, titles.TitleProcessor]]:
    """Stored (tenant, processor) of these conversations."""
    rows = load_rows(connection, processors, convs)
    return {conv: (row["tenant_id"], from_row(row)) for conv, row in rows.items()}
