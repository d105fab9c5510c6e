"""Snapshot contents (the base state plus the view) and a conversation rebuilt from a snapshot + tail.

The view is stored as the active branch the agent reads (condensations applied) plus the path
from the last condensation on it to the active leaf, so a restore costs O(|view| + tail), not
O(conversation length). Events off that path (older branches, condensed-away history) are not
stored: a tail event that needs one (a branch switch into the past) makes the restore refold the
conversation from its first event instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from immutables import Map
from pyrsistent import pvector

from convdb.producers.positions import LogPositions
from convdb.producers.state import ConversationState, fold, initial
from convdb.projections.errors import ProjectionError
from convdb.projections.view import ViewState
from convdb.schemas import Codec, CondensationEvent, Event, ForkEvent, LedgerRecord, Snapshot
from convdb.schemas.topics import EVENTS

MAX_VIEW_BYTES = 512 * 1024
"""Above this the view is left out of the snapshot (records stay under librdkafka's 1 MB limit)."""


def view_fields(state: ViewState, codec: Codec, max_bytes: int = MAX_VIEW_BYTES) -> dict[str, object]:
    """The Snapshot v2 view fields of `state` (view_complete false when it does not fit)."""
    visible = state.visible.tolist()
    path = state.path.tolist()
    last = max((i for i, e in enumerate(path) if isinstance(e, CondensationEvent)), default=None)
    suffix = path[last:] if last is not None else []
    visible_ids = {e.id for e in visible}
    view_events: list[bytes] = []
    size = 0
    for event in (*visible, *(e for e in suffix if e.id not in visible_ids)):
        data = codec.encode(event)
        size += len(data)
        if size > max_bytes:
            return {"view_complete": False}
        view_events.append(data)
    return {
        "view_complete": True,
        "view_events": tuple(view_events[: len(visible)]),
        "path_ids": tuple(e.id for e in suffix),
        "path_events": tuple(view_events[len(visible) :]),
    }


def view_from_snapshot(snapshot: Snapshot, codec: Codec) -> ViewState:
    """The view a `view_complete` snapshot describes (events off the stored path are absent)."""
    visible: list[Event] = [codec.decode(b, expect=EVENTS.value_types) for b in snapshot.view_events]
    extra: list[Event] = [codec.decode(b, expect=EVENTS.value_types) for b in snapshot.path_events]
    by_id = {e.id: e for e in (*visible, *extra)}
    visible_vector = pvector(visible)
    if snapshot.path_ids:
        path = pvector(by_id[i] for i in snapshot.path_ids)
    else:
        path = visible_vector  # no condensation on the branch: the branch is the path (shared)
    log = sorted(by_id.values(), key=lambda e: e.seq)
    return ViewState(
        conversation_id=snapshot.conversation_id,
        tenant_id=snapshot.tenant_id,
        last_seq=snapshot.last_seq,
        events=Map(by_id),
        log=pvector(log),
        active_leaf=snapshot.active_leaf_id,
        path=path,
        visible=visible_vector,
        condensations=pvector(e.id for e in log if isinstance(e, CondensationEvent)),
        forks=pvector(e for e in log if isinstance(e, ForkEvent)),
    )


def build_snapshot(
    base: Snapshot, view: ViewState, codec: Codec, *, keep_view: bool = True, **positions: int
) -> Snapshot:
    """`base` (the conversation's base state) completed with the view and the partition's offsets.

    Without `keep_view` the snapshot says its view is incomplete, so a restore refolds the
    conversation from its first event.
    """
    fields = view_fields(view, codec) if keep_view else {"view_complete": False}
    return base.model_copy(update={**fields, **positions})


def restored_state(
    conversation_id: str,
    snapshot: Snapshot | None,
    events: Sequence[Event],
    ledger: Sequence[LedgerRecord],
    codec: Codec,
    refuse: Callable[[int, ProjectionError], None] | None = None,
) -> ConversationState:
    """The state of a conversation: its snapshot's (when it holds the view), then the tail folded.

    Without a usable snapshot, `events` start at the conversation's first event (the restore
    read from `first_events_offset`), so folding them from nothing gives the same state. With
    `refuse`, a record the fold refuses is passed to it (its index in events + ledger) and
    skipped; without, its `ProjectionError` propagates.
    """
    if snapshot is not None and snapshot.view_complete:
        view = view_from_snapshot(snapshot, codec)
        state = ConversationState(view, snapshot.execution_status, cost=snapshot.total_cost)
    else:
        state = initial(conversation_id)
    for index, record in enumerate((*events, *ledger)):
        try:
            state = fold(state, record)
        except ProjectionError as exc:
            if refuse is None:
                raise
            refuse(index, exc)
    return state


def restored_positions(
    partition: int,
    snapshot: Snapshot | None,
    event_offsets: Sequence[int],
    ledger: Sequence[tuple[int, LedgerRecord]],
) -> LogPositions:
    """Where a restored conversation's records are; everything read is needed again by the next
    restore until a snapshot covers it."""
    positions = LogPositions(inbox_offset=snapshot.inbox_offset if snapshot else -1)
    for offset, record in ledger:
        positions.read_back(offset, record)
    if snapshot is not None:
        positions.first_events_offset = snapshot.first_events_offset
        positions.events_position = (partition, snapshot.events_offset)
    if event_offsets:
        if snapshot is None:
            positions.first_events_offset = event_offsets[0]
        positions.events_restore_from = event_offsets[0]
        positions.events_position = (partition, event_offsets[-1] + 1)
        positions.events_since_snapshot = len(event_offsets)
    positions.effects_restore_from = ledger[0][0] if ledger else None
    return positions
