"""The titles consumer: `convdb.projections.titles` processors in the store, plus the LLM-title effect.

The fold (in `apply`) only records titles that are in the log. When a processor wants an LLM
title and the consumer is caught up with the conversation's partition, `after_commit` (outside
the store transaction) calls the LLM and publishes a `TitleEvent` (seq 0, source `hook`) with a
deterministic id; folding that event sets the title and disables the processor. A replay only
folds the `TitleEvent`, so it never calls the LLM again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy.engine import Connection, Engine

from convdb.consumers.base import Batch, Change, ConversationProjector, DigestOf, Fold
from convdb.consumers.titles.service import TitleService
from convdb.consumers.titles.tables import from_row, metadata, processors, to_row
from convdb.infra.settings import Settings
from convdb.projections import titles

logger = logging.getLogger(__name__)

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
