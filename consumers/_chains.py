"""Per-conversation chains (`convdb.projections.chain`) in a store table: for the projectors whose own
rows are not a conversation's (index, effects), so that they admit what the other projections do.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convdb.consumers.base import load_rows
from convdb.consumers.store import upsert
from convdb.projections import chain
from convdb.schemas.events import Event


def chain_table(name: str, metadata: sa.MetaData) -> sa.Table:
    """A projector's table of chains, one row per conversation."""
    return sa.Table(
        name,
        metadata,
        sa.Column("conversation_id", sa.String(200), primary_key=True),
        sa.Column("tenant_id", sa.String(200), nullable=False, doc="Tenant of the first event."),
        sa.Column("last_seq", sa.BigInteger, nullable=False),
        sa.Column("last_id", sa.String(200), doc="Id of the event at last_seq."),
    )


class Chains:
    """The chains of a batch's conversations: loaded once, stepped per event, written once."""

    def __init__(self, table: sa.Table, stored: Mapping[str, chain.Chain]) -> None:
        self.table = table
        self.states = dict(stored)
        self._changed: set[str] = set()

    @classmethod
    def load(cls, connection: Connection, table: sa.Table, conversation_ids: list[str]) -> Chains:
        """The stored chains of these conversations."""
        rows = load_rows(connection, table, conversation_ids)
        return cls(table, {conv: _chain_of(row) for conv, row in rows.items()})

    def get(self, conversation_id: str) -> chain.Chain:
        """The conversation's chain so far (its initial one when none is stored)."""
        return self.states.get(conversation_id) or chain.initial(conversation_id)

    def step(self, event: Event, known: Container[str] | None = None) -> chain.Chain | None:
        """The chain after `event` (not recorded: `advance` does), None for a redelivery.

        Raises:
            ProjectionError: the chain refuses the event (`convdb.projections.chain.fold`).
        """
        return chain.fold(self.get(event.conversation_id), event, known)

    def advance(self, state: chain.Chain) -> None:
        """Record a conversation's new chain."""
        if self.states.get(state.conversation_id) != state:
            self.states[state.conversation_id] = state
            self._changed.add(state.conversation_id)

    def write(self, connection: Connection) -> None:
        """Upsert the chains that changed."""
        rows = [self.states[conv]._asdict() for conv in sorted(self._changed)]
        upsert(connection, self.table, rows, ["conversation_id"])
        self._changed.clear()


def _chain_of(row: Mapping[str, Any]) -> chain.Chain:
    return chain.Chain(row["conversation_id"], row["tenant_id"], row["last_seq"], row["last_id"])
