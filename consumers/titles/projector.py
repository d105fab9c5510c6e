"""The titles consumer: `projections.titles` processors in the store, plus the LLM-title effect.

The fold (in `apply`) only records titles that are in the log. When a processor wants an LLM
title and the consumer is caught up with the conversation's partition, `after_commit` (outside
the store transaction) calls the LLM and publishes a `TitleEvent` (seq 0, source `hook`) with a
deterministic id; folding that event sets the title and disables the processor. A replay only
folds the `TitleEvent`, so it never calls the LLM again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from consumers._rows import by_conversation, events_only, fold_checked
from consumers.base import ConsumedRecord
from consumers.errors import RecordsRejectedError
from consumers.store import upsert
from consumers.titles.service import TitleService
from infra.settings import Settings
from projections import titles
from schemas.topics import EVENTS

logger = logging.getLogger(__name__)

metadata = sa.MetaData()

processors = sa.Table(
    "titles_conversations",
    metadata,
    sa.Column("conversation_id", sa.String(200), primary_key=True),
    sa.Column("tenant_id", sa.String(200), nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("title", sa.String(200)),
    sa.Column("origin", sa.String(20)),
    sa.Column("first_user_message", sa.Text),
    sa.Column("last_seq", sa.BigInteger, nullable=False),
    sa.Column("annotations", sa.Text, nullable=False, doc="JSON: ids of the TitleEvents folded."),
    sa.Column("partition", sa.Integer, nullable=False, doc="Events partition of the conversation."),
)
"""One title processor per conversation."""

CHUNK = 500


class TitlesConsumer:
    """Projector `titles`: a title per conversation; LLM titles when `llm.title_model` is set."""

    name = "titles"
    topics = (EVENTS,)
    version = 1

    def __init__(
        self, settings: Settings | None = None, complete: Callable[[str, str], str] | None = None
    ) -> None:
        self.settings = settings
        enabled = settings is not None and settings.llm.title_model is not None
        self.service = TitleService(settings, complete) if enabled and settings is not None else None
        self._pending: dict[str, tuple[str, int]] = {}

    def create(self, connection: Connection) -> None:
        """Create the titles table (idempotent)."""
        metadata.create_all(connection)

    def drop(self, connection: Connection) -> None:
        """Drop the titles table."""
        metadata.drop_all(connection)

    def apply(self, connection: Connection, records: Sequence[ConsumedRecord]) -> None:
        """Fold the batch into the processors; note the ones that now want an LLM title."""
        groups = by_conversation(events_only(records))
        if not groups:
            return
        states = load_states(connection, list(groups))
        rejected: list[tuple[ConsumedRecord, BaseException]] = []
        rows = []
        for conv, group in groups.items():
            tenant, before = states.get(conv) or (group[0].value.tenant_id, titles.initial(conv))  # type: ignore[attr-defined]
            after, _ = fold_checked(titles.fold, before, group, rejected)
            if after is before:
                continue
            rows.append(to_row(after, tenant, group[-1].partition))
            if self.service is not None and titles.wants_llm_title(after, True):
                self._pending[conv] = (group[-1].topic, group[-1].partition)
            else:
                self._pending.pop(conv, None)
        if rejected:
            raise RecordsRejectedError(rejected)
        upsert(connection, processors, rows, ["conversation_id"])

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

    def digests(self, connection: Connection) -> dict[str, str]:
        """Per-conversation digest: the title, its origin and the processor status."""
        import hashlib

        query = sa.select(
            processors.c.conversation_id, processors.c.title, processors.c.origin, processors.c.status
        )
        return {
            conv: hashlib.sha256(f"{title}\n{origin}\n{status}".encode()).hexdigest()
            for conv, title, origin, status in connection.execute(query)
        }


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
    }


def from_row(row: Any) -> titles.TitleProcessor:
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
    )


def load_states(connection: Connection, convs: list[str]) -> dict[str, tuple[str, titles.TitleProcessor]]:
    """Stored (tenant, processor) of these conversations."""
    found = {}
    for start in range(0, len(convs), CHUNK):
        query = sa.select(processors).where(processors.c.conversation_id.in_(convs[start : start + CHUNK]))
        for row in connection.execute(query).mappings():
            found[row["conversation_id"]] = (row["tenant_id"], from_row(row))
    return found
