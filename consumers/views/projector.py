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
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from consumers._rows import event_from_json, micros
from consumers.base import Batch, Change, ConsumedRecord, ConversationProjector, DigestOf, Fold, load_rows
from consumers.store import bulk_insert, upsert
from consumers.views.tables import EVENT_COLUMNS, conversations, events, metadata
from infra.settings import Settings
from projections import view
from projections.view import ViewState


@dataclass(slots=True)
class _Cached:
    state: view.ViewState
    positions: dict[str, int]
    """Event id -> position in the log (to write the branch as position segments)."""
    segments: list[list[int]] = field(default_factory=list)
    """The active branch of `state` as position segments."""
    branch_ids: str = ""
    """Ids of the active branch of `state`, joined by newlines (for the digest)."""

    @classmethod
    def of(cls, state: view.ViewState) -> _Cached:
        """The cache entry of a state rebuilt from the store."""
        positions = {e.id: i for i, e in enumerate(state.log)}
        ids = "\n".join(e.id for e in state.visible)
        return cls(state, positions, branch_segments(state, positions), ids)

    def advance(self, after: view.ViewState) -> None:
        """Move to `after` (whose new log entries have positions already), updating the branch.

        A batch of plain tail appends extends the branch: only the new events are walked, so a
        batch costs O(its events), not O(the branch) as recomputing segments and digest text did.
        """
        before, k = self.state, len(self.state.path)
        extended = (
            before.visible is before.path
            and after.visible is after.path
            and len(after.path) >= k
            and (k == 0 or after.path[k - 1] is before.path[k - 1])  # the one path through that node
        )
        self.state = after
        if not extended:
            self.segments = branch_segments(after, self.positions)
            self.branch_ids = "\n".join(e.id for e in after.visible)
            return
        added = after.path[k:]
        _extend_segments(self.segments, [self.positions[e.id] for e in added])
        if added:
            joined = "\n".join(e.id for e in added)
            self.branch_ids = f"{self.branch_ids}\n{joined}" if k else joined


class ViewsConsumer(ConversationProjector[view.ViewState]):
    """Projector `views`: the active branch of every conversation (DESIGN §8)."""

    name = "views"
    version = 2
    metadata = metadata
    table = conversations
    digest_of = (DigestOf(conversations, ("digest",), precomputed=True),)
    projection = Fold(view.initial, view.fold, view.fold_all)

    def __init__(self, settings: Settings | None = None, cache_size: int = 5000) -> None:
        super().__init__(settings)
        self.cache_size = cache_size
        self._cache: OrderedDict[str, _Cached] = OrderedDict()

    def drop(self, connection: Connection) -> None:
        """Drop the views tables (and the v1 branch table, if present)."""
        super().drop(connection)
        connection.execute(sa.text("DROP TABLE IF EXISTS views_branch"))
        self._cache.clear()

    def load(
        self, connection: Connection, conversation_ids: list[str]
    ) -> dict[str, tuple[Any, view.ViewState]]:
        """(cache entry, state) per stored conversation: cached when it has folded what the store holds."""
        counts = load_rows(connection, conversations, conversation_ids)
        found: dict[str, tuple[Any, ViewState]] = {}
        for conv, row in counts.items():
            cached = self._cache.get(conv)
            if cached is None or len(cached.state.log) != row["event_count"]:
                cached = _Cached.of(load_state(connection, conv))
            found[conv] = (cached, cached.state)
        return found

    def write(self, connection: Connection, changes: list[Change[view.ViewState]], batch: Batch) -> None:
        """Append the new log entries; upsert each changed conversation's row (branch, digest)."""
        log_rows: list[tuple[Any, ...]] = []
        summary_rows: list[dict[str, Any]] = []
        for change in changes:
            cached = change.stored or _Cached(change.before, {})
            log_rows.extend(_log_rows(change, cached.positions, batch))
            cached.advance(change.after)
            summary_rows.append(_summary_row(cached))
            self._remember(change.conversation_id, cached)
        bulk_insert(connection, events, EVENT_COLUMNS, log_rows)
        upsert(connection, conversations, summary_rows, ["conversation_id"])

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
    _extend_segments(segments, [positions[event.id] for event in state.visible])
    return segments


def _extend_segments(segments: list[list[int]], added: list[int]) -> None:
    for pos in added:
        if segments and segments[-1][1] == pos - 1:
            segments[-1][1] = pos
        else:
            segments.append([pos, pos])


def _log_rows(
    change: Change[view.ViewState], positions: dict[str, int], batch: Batch
) -> list[tuple[Any, ...]]:
    before, after, folded = change.before, change.after, change.records
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
                batch.event_json(event),
            )
        )
    return rows


def _summary_row(cached: _Cached) -> dict[str, Any]:
    state = cached.state
    last = state.log[len(state.log) - 1]
    length = len(state.visible)
    return {
        "conversation_id": state.conversation_id,
        "tenant_id": state.tenant_id or "",
        "last_seq": state.last_seq,
        "event_count": len(state.log),
        "active_leaf": state.active_leaf,
        "branch_length": length,
        "branch": json.dumps(cached.segments),
        "digest": view.branch_digest(state.last_seq, state.active_leaf, cached.branch_ids, length),
        "updated_us": micros(last.timestamp),
    }
