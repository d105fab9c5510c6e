"""The views consumer: folds `convdb.projections.view` per conversation and keeps its rows current.

Per batch, each touched conversation's stored row is its view's tip (`convdb.projections.view_tip`).
A run of plain tail appends, nearly every run, extends the tip and appends the log entries:
no full `ViewState` is needed, so memory does not grow with the events consumed. Any other
run (a branch switch, fork or condensation, a redelivery, a gap) folds the full state, which
comes from a cache bounded in events when it has folded exactly what the store holds, else is
rebuilt from `views_events`.

The short way cannot see an event that reuses the id of an event older than the active leaf
(ids are UUIDs from one writer; a unique index on them, which would, scattered its writes over
the whole index and made inserts 3x slower at 1M events). Such an event is logged as a new
node, where the pure fold ignores it; the conversation's log then no longer folds back to its
row, and the records that need its full view are refused (`StoredViewError`, to the DLQ)
instead of being folded against a view that differs from the stored one.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convdb.consumers._rows import micros
from convdb.consumers.base import (
    Batch,
    ConsumedRecord,
    Fold,
    Rejection,
    TableProjector,
    fold_records,
    load_rows,
)
from convdb.consumers.errors import StoredViewError
from convdb.consumers.store import bulk_insert, upsert
from convdb.consumers.views import segments
from convdb.consumers.views.queries import load_state
from convdb.consumers.views.tables import EVENT_COLUMNS, conversations, events, metadata
from convdb.infra.settings import Settings
from convdb.projections import view
from convdb.projections._sequence import ANNOTATION_SEQ
from convdb.projections.errors import ProjectionError
from convdb.projections.view_tip import Tip, extend_tip, tip


@dataclass(slots=True)
class _Full:
    """A conversation's full view, with each logged event's position."""

    state: view.ViewState
    positions: dict[str, int]


@dataclass
class _Writes:
    """What one batch writes: log rows (and the records they log), conversation rows, and the
    refused records."""

    log: list[tuple[Any, ...]] = field(default_factory=list)
    logged: list[ConsumedRecord] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)


class ViewsConsumer(TableProjector):
    """Projector `views`: the active branch of every conversation (DESIGN §8)."""

    name = "views"
    version = 5
    metadata = metadata
    projection = Fold(view.initial, view.fold, view.fold_all)

    def __init__(self, settings: Settings | None = None, cache_events: int = 50_000) -> None:
        super().__init__(settings)
        self.cache_events = cache_events
        """Most events the cache of full states holds, over all its conversations."""
        self._cache: OrderedDict[str, _Full] = OrderedDict()
        self._cached = 0

    def drop(self, connection: Connection) -> None:
        """Drop the views tables (and the v1 branch table, if present)."""
        super().drop(connection)
        connection.execute(sa.text("DROP TABLE IF EXISTS views_branch"))
        self._cache.clear()
        self._cached = 0

    def apply(self, connection: Connection, batch: Sequence[ConsumedRecord]) -> Sequence[Rejection]:
        """Fold the batch into each touched conversation; write the log and the changed rows."""
        batch = Batch.of(batch)
        groups = batch.by_conversation()
        if not groups:
            return []
        stored = load_rows(connection, conversations, list(groups))
        writes = _Writes()
        for conv, group in groups.items():
            self._fold(connection, conv, group, stored.get(conv), writes)
        batch.store_payloads(connection, writes.logged)
        bulk_insert(connection, events, EVENT_COLUMNS, writes.log)
        upsert(connection, conversations, writes.rows, ["conversation_id"])
        return writes.rejected

    def _fold(
        self,
        connection: Connection,
        conv: str,
        group: list[ConsumedRecord],
        row: Mapping[str, Any] | None,
        writes: _Writes,
    ) -> None:
        full = self._full(conv, row)
        start = _tip_of(conv, row)
        extended = extend_tip(start, [r.value for r in group])  # type: ignore[misc]
        if extended is not None and _logs_an_annotation_again(connection, conv, group, full):
            extended = None  # a redelivered annotation: the full fold ignores it, as the pure fold does
        if extended is not None:
            added = range(start.events, extended.events)
            writes.log.extend(_log_row(conv, p, r) for p, r in zip(added, group, strict=True))
            writes.logged.extend(group)
            branch = segments.decode(row["branch"]) if row is not None else []
            segments.extend(branch, [p for p, r in zip(added, group, strict=True) if r.value.seq])  # type: ignore[attr-defined]
            if full is not None:  # keep a cached full state current (cheap for tail appends)
                self._advance(conv, full, group, start.events)
            writes.rows.append(_row(extended, branch, group[-1].value.timestamp))  # type: ignore[attr-defined]
            return
        if full is None:
            state = _rebuilt(connection, conv, row)
            if isinstance(state, StoredViewError):
                writes.rejected.extend(Rejection(r, state) for r in group)
                return
            full = _Full(state, {e.id: i for i, e in enumerate(state.log)})
        before = full.state
        after, folded = fold_records(self.projection, before, group, writes.rejected)
        if after is before:
            return
        _log_new(before, after, folded, full.positions, writes)
        full.state = after
        self._remember(conv, full)
        last = after.log[len(after.log) - 1]
        writes.rows.append(_row(tip(after), branch_segments(after, full.positions), last.timestamp))

    def _full(self, conv: str, row: Mapping[str, Any] | None) -> _Full | None:
        """The cached full state, if it has folded exactly what the store holds."""
        full = self._cache.get(conv)
        if full is not None and (row is None or len(full.state.log) != row["event_count"]):
            self._forget(conv)
            return None
        return full

    def _advance(self, conv: str, full: _Full, group: list[ConsumedRecord], start: int) -> None:
        for position, record in enumerate(group, start):
            full.positions[record.value.id] = position  # type: ignore[attr-defined]
        full.state = view.fold_all(full.state, [r.value for r in group])  # type: ignore[misc]
        self._remember(conv, full)

    def _remember(self, conv: str, full: _Full) -> None:
        self._forget(conv)
        self._cache[conv] = full
        self._cached += len(full.state.log)
        while self._cached > self.cache_events and self._cache:
            self._forget(next(iter(self._cache)))

    def _forget(self, conv: str) -> None:
        gone = self._cache.pop(conv, None)
        if gone is not None:
            self._cached -= len(gone.state.log)

    def digests(self, connection: Connection) -> dict[str, str]:
        """`view.digest` of every conversation, from its row and the ids on its branch."""
        heads = {
            r.conversation_id: r
            for r in connection.execute(
                sa.select(
                    conversations.c.conversation_id,
                    conversations.c.last_seq,
                    conversations.c.active_leaf,
                    conversations.c.branch,
                    conversations.c.branch_length,
                )  # fmt: skip
            )
        }
        query = sa.select(events.c.conversation_id, events.c.position, events.c.event_id).order_by(
            events.c.conversation_id, events.c.position
        )
        out = {}
        for conv, log in itertools.groupby(connection.execute(query), key=lambda r: r[0]):
            head = heads.get(conv)
            if head is None:
                continue
            ids = {position: event_id for _, position, event_id in log}
            branch = "\n".join(ids[p] for p in segments.positions(segments.decode(head.branch)))
            out[conv] = view.branch_digest(head.last_seq, head.active_leaf, branch, head.branch_length)
        return out


def _rebuilt(
    connection: Connection, conv: str, row: Mapping[str, Any] | None
) -> view.ViewState | StoredViewError:
    """The conversation's full view from its stored log, or why that log does not fold to its row."""
    if row is None:
        return view.initial(conv)
    try:
        state = load_state(connection, conv)
    except ProjectionError as exc:
        folded: Any = exc
    else:
        if len(state.log) == row["event_count"]:
            return state
        folded = f"{len(state.log)} events"
    return StoredViewError(
        f"conversation {conv}: its stored view log ({row['event_count']} events) folds to {folded}: "
        "an event reused an earlier event's id; records needing its full view are refused until "
        "the views projection is rebuilt by replay from a log without the reuse"
    )


def branch_segments(state: view.ViewState, positions: dict[str, int]) -> segments.Segments:
    """The active branch as runs of log positions, root first."""
    return segments.runs_of(positions[event.id] for event in state.visible)


def _tip_of(conv: str, row: Mapping[str, Any] | None) -> Tip:
    if row is None:
        return Tip(conv)
    return Tip(
        conv,
        row["tenant_id"] or None,
        row["last_seq"],
        row["event_count"],
        row["active_leaf"],
        row["branch_length"],
    )


def _row(t: Tip, branch: segments.Segments, last_timestamp: Any) -> dict[str, Any]:
    return {
        "conversation_id": t.conversation_id,
        "tenant_id": t.tenant_id or "",
        "last_seq": t.last_seq,
        "event_count": t.events,
        "active_leaf": t.active_leaf,
        "branch_length": t.branch_length,
        "branch": segments.encode(branch),
        "updated_us": micros(last_timestamp),
    }


def _logs_an_annotation_again(
    connection: Connection, conv: str, group: list[ConsumedRecord], full: _Full | None
) -> bool:
    """Whether an annotation (seq 0) of `group` is logged already: its id is deterministic (a title's,
    an OpenHands state record's), so a redelivery at another offset carries the same id, which the
    tip cannot see (`extend_tip`'s precondition). Asked of the cached full view when there is one,
    else of the log's annotation rows; a group without annotations asks nothing."""
    ids = {r.value.id for r in group if r.value.seq == ANNOTATION_SEQ}  # type: ignore[attr-defined]
    if not ids:
        return False
    if full is not None:
        return not ids.isdisjoint(full.positions)
    c = events.c
    query = sa.select(c.event_id).where(
        c.conversation_id == conv, c.seq == ANNOTATION_SEQ, c.event_id.in_(ids)
    )
    return connection.execute(query.limit(1)).first() is not None


def _log_row(conv: str, position: int, record: ConsumedRecord) -> tuple[Any, ...]:
    event: Any = record.value
    return (conv, position, event.id, event.seq, micros(event.timestamp), record.partition, record.offset)


def _log_new(
    before: view.ViewState,
    after: view.ViewState,
    folded: Sequence[ConsumedRecord],
    positions: dict[str, int],
    writes: _Writes,
) -> None:
    """Log the events the fold added (each from the record that delivered it first)."""
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
    for position, event, record in zip(range(start, start + len(added)), added, records, strict=True):
        positions[event.id] = position
        writes.log.append(_log_row(conv, position, record))
        writes.logged.append(record)
