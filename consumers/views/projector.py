"""The views consumer: folds `projections.view` per conversation and keeps its rows current.

Per batch, each touched conversation's `ViewState` comes from an in-process cache when the
cached state has folded exactly the number of events the store says (events are append-only
and folded exactly once, so an equal count means an equal state), else it is rebuilt from
`views_events`. New log entries are appended, and the conversation row (with the active
branch as position segments) is upserted once per batch.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from consumers._rows import by_conversation, event_from_json, event_json, events_only, fold_batch, micros
from consumers.base import ConsumedRecord
from consumers.errors import RecordsRejectedError
from consumers.store import bulk_insert, upsert
from consumers.views.tables import EVENT_COLUMNS, conversations, events, metadata
from infra.settings import Settings
from projections import view
from schemas.topics import EVENTS

CHUNK = 500


@dataclass(slots=True)
class _Cached:
    state: view.ViewState
    positions: dict[str, int]
    """Event id -> position in the log (to write the branch as position segments)."""


class ViewsConsumer:
    """Projector `views`: the active branch of every conversation (DESIGN §8)."""

    name = "views"
    topics = (EVENTS,)
    version = 2

    def __init__(self, settings: Settings | None = None, cache_size: int = 5000) -> None:
        self.settings = settings
        self.cache_size = cache_size
        self._cache: OrderedDict[str, _Cached] = OrderedDict()

    def create(self, connection: Connection) -> None:
        """Create the views tables (idempotent)."""
        metadata.create_all(connection)

    def drop(self, connection: Connection) -> None:
        """Drop the views tables (and the v1 branch table, if present)."""
        metadata.drop_all(connection)
        connection.execute(sa.text("DROP TABLE IF EXISTS views_branch"))
        self._cache.clear()

    def apply(self, connection: Connection, records: Sequence[ConsumedRecord]) -> None:
        """Fold a batch and write the changed rows; refused records raise `RecordsRejectedError`."""
        groups = by_conversation(events_only(records))
        if not groups:
            return
        loaded = self._load(connection, list(groups))
        rejected: list[tuple[ConsumedRecord, BaseException]] = []
        log_rows: list[tuple[Any, ...]] = []
        summary_rows: list[dict[str, Any]] = []
        for conv, group in groups.items():
            cached = loaded.get(conv) or _Cached(view.initial(conv), {})
            before = cached.state
            after, folded = fold_batch(view.fold_all, view.fold, before, group, rejected)
            if after is before:
                continue
            log_rows.extend(_log_rows(before, after, folded, cached.positions))
            summary_rows.append(_summary_row(after, cached.positions))
            cached.state = after
            self._remember(conv, cached)
        if rejected:
            self._cache.clear()
            raise RecordsRejectedError(rejected)
        bulk_insert(connection, events, EVENT_COLUMNS, log_rows)
        upsert(connection, conversations, summary_rows, ["conversation_id"])

    def digests(self, connection: Connection) -> dict[str, str]:
        """Per-conversation digest of the view (last seq, active leaf, active branch)."""
        rows = connection.execute(sa.select(conversations.c.conversation_id, conversations.c.digest))
        return dict(rows.all())

    def _load(self, connection: Connection, convs: list[str]) -> dict[str, _Cached]:
        counts: dict[str, int] = {}
        for start in range(0, len(convs), CHUNK):
            query = sa.select(conversations.c.conversation_id, conversations.c.event_count).where(
                conversations.c.conversation_id.in_(convs[start : start + CHUNK])
            )
            counts.update(connection.execute(query).all())
        found: dict[str, _Cached] = {}
        for conv, count in counts.items():
            cached = self._cache.get(conv)
            if cached is None or len(cached.state.log) != count:
                state = load_state(connection, conv)
                cached = _Cached(state, {e.id: i for i, e in enumerate(state.log)})
            found[conv] = cached
        return found

    def _remember(self, conv: str, cached: _Cached) -> None:
        self._cache[conv] = cached
        self._cache.move_to_end(conv)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)


def load_state(connection: Connection, conversation_id: str, **bounds: int) -> view.ViewState:
    """Rebuild a conversation's view from its stored log; `max_offset`/`max_timestamp_us` bound it."""
    query = sa.select(events.c.payload).where(events.c.conversation_id == conversation_id)
    if "max_offset" in bounds:
        query = query.where(events.c.offset <= bounds["max_offset"])
    if "max_timestamp_us" in bounds:
        query = query.where(events.c.timestamp_us <= bounds["max_timestamp_us"])
    payloads = connection.execute(query.order_by(events.c.position)).scalars()
    return view.fold_all(view.initial(conversation_id), (event_from_json(p) for p in payloads))


def branch_segments(state: view.ViewState, positions: dict[str, int]) -> list[list[int]]:
    """The active branch as runs of consecutive log positions, root first."""
    segments: list[list[int]] = []
    for event in state.visible:
        pos = positions[event.id]
        if segments and segments[-1][1] == pos - 1:
            segments[-1][1] = pos
        else:
            segments.append([pos, pos])
    return segments


def _log_rows(
    before: view.ViewState,
    after: view.ViewState,
    folded: Sequence[ConsumedRecord],
    positions: dict[str, int],
) -> list[tuple[Any, ...]]:
    start = len(before.log)
    added = after.log[start:]
    if len(added) == len(folded):
        records: Sequence[ConsumedRecord] = folded  # no duplicate: one new log entry per record, in order
    else:
        where: dict[str, ConsumedRecord] = {}
        for r in folded:
            where.setdefault(r.value.id, r)  # type: ignore[attr-defined]  # the first delivery is the one folded
        records = [where[event.id] for event in added]
    conv = after.conversation_id
    rows = []
    for position, event, record in zip(range(start, start + len(added)), added, records, strict=True):
        positions[event.id] = position
        rows.append(
            (
                conv,
                position,
                event.id,
                event.seq,
                micros(event.timestamp),
                record.partition,
                record.offset,
                event_json(event),
            )
        )
    return rows


def _summary_row(state: view.ViewState, positions: dict[str, int]) -> dict[str, Any]:
    last = state.log[len(state.log) - 1]
    return {
        "conversation_id": state.conversation_id,
        "tenant_id": state.tenant_id or "",
        "last_seq": state.last_seq,
        "event_count": len(state.log),
        "active_leaf": state.active_leaf,
        "branch_length": len(state.visible),
        "branch": json.dumps(branch_segments(state, positions)),
        "digest": view.digest(state),
        "updated_us": micros(last.timestamp),
    }
