"""The titles consumer: `convdb.projections.titles` processors in the store, plus the LLM-title effect.

The fold (in `apply`) only records titles that are in the log. When a processor wants an LLM
title and the consumer is caught up with the conversation's partition, `after_commit` (outside
the store transaction) calls the LLM and publishes a `TitleEvent` (seq 0, source `hook`) with a
deterministic id; folding that event sets the title and disables the processor. A replay only
folds the `TitleEvent`, so it never calls the LLM again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from convdb.consumers.base import Batch, Change, ConversationProjector, DigestOf, Fold, load_rows
from convdb.consumers.titles.service import TitleService
from convdb.infra.settings import Settings
from convdb.projections import titles

logger = logging.getLogger(__name__)

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

TitleChange = Change[titles.TitleProcessor]


class TitlesConsumer(ConversationProjector[titles.TitleProcessor]):
    """Projector `titles`: a title per conversation; LLM titles when `llm.title_model` is set."""

    name = "titles"
    version = 2
    metadata = metadata
    table = processors
    digest_of = (DigestOf(processors, ("title", "origin", "status")),)
    projection = Fold(titles.initial, titles.fold, titles.fold_all)

    def __init__(
        self, settings: Settings | None = None, complete: Callable[[str, str], str] | None = None
    ) -> None:
        super().__init__(settings)
        enabled = settings is not None and settings.llm.title_model is not None
        self.service = TitleService(settings, complete) if enabled and settings is not None else None
        self._pending: dict[str, tuple[str, int]] = {}

    def write(self, connection: Connection, changes: list[TitleChange], batch: Batch) -> None:
        """Upsert the processors; note the ones that now want an LLM title."""
        super().write(connection, changes, batch)
        for change in changes:
            last = change.records[-1]
            if self.service is not None and titles.wants_llm_title(change.after, True):
                self._pending[change.conversation_id] = (last.topic, last.partition)
            else:
                self._pending.pop(change.conversation_id, None)

    def to_row(self, change: TitleChange) -> dict[str, Any]:
        """The processor's row (the tenant is the conversation's first event's)."""
        return to_row(change.after, change.after.tenant_id or "", change.records[-1].partition)

    def from_row(self, row: Mapping[str, Any]) -> titles.TitleProcessor:
        """The processor a row holds."""
        return from_row(row)

    def after_commit(self, engine: Engine, caught_up: set[tuple[str, int]]) -> None:
        """Make the LLM titles of conversations whose partition is caught up (the effect)."""
        if self.service is None or not self._pending:
            return
        ready = {conv: tp for conv, tp in self._pending.items() if tp in caught_up}
        for conv in ready:
            del self._pending[conv]
        if ready:
            for conv in self.service.make_titles(engine, list(ready)):
                self._pending[conv] = ready[conv]  # the call failed: try again on the next round


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
