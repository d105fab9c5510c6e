"""The derived view of one conversation: its event tree, active leaf and active branch.

A pure fold (DESIGN §1 "derived view", §8). Every event of the chain except an
`ActiveLeafChangedEvent` is a node of a tree linked by `parent_id`; a new node becomes the
active leaf, an `ActiveLeafChangedEvent` moves the leaf to another node (branch switch).
Annotations (seq 0, e.g. a `TitleEvent`) and parentless events after the root are recorded
but are not on any branch. A `ForkEvent` is always a root: its `parent_id`, if any, names an
event of the source conversation.

State is persistent (HAMT map + vectors), so `fold` is O(log n) per event and the active
branch is tail-appended; a condensation rewrites only the visible branch, and the branch is
rebuilt from `path_to_root` only on a branch switch, a fork or a new branch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from immutables import Map
from pyrsistent import PVector, pvector

from convdb.projections._condense import apply_condensation, condense
from convdb.projections._sequence import ANNOTATION_SEQ, admit
from convdb.projections.errors import ProjectionError, UnknownEventError
from convdb.schemas.events import ActiveLeafChangedEvent, CondensationEvent, Event, ForkEvent

_NO_EVENTS: Map[str, Event] = Map()
_EMPTY: PVector[Any] = pvector()
_OFF_TAIL_KINDS = frozenset({"active_leaf_changed", "fork", "condensation"})
"""Kinds that move the active branch other than by one event at its tail."""


class ViewState(NamedTuple):
    """The view of one conversation after some prefix of its events (immutable).

    A NamedTuple rather than a frozen dataclass: it is built once per event and a frozen
    dataclass costs ~4x more to construct, which the sink's 30k events/s budget notices.
    """

    conversation_id: str
    tenant_id: str | None = None
    last_seq: int = 0
    """seq of the last chain event folded (0 before the first)."""
    events: Map[str, Event] = _NO_EVENTS
    """Every folded event by id; `parent_id` on each is the tree's parent link."""
    log: PVector[Event] = _EMPTY
    """Every folded event in fold order (seq order, annotations where they arrived)."""
    active_leaf: str | None = None
    path: PVector[Event] = _EMPTY
    """Root-first path to the active leaf, condensations not applied."""
    visible: PVector[Event] = _EMPTY
    """The active branch: `path` with condensations applied (what the agent reads)."""
    condensations: PVector[str] = _EMPTY
    """Ids of every `CondensationEvent` seen, on any branch, in seq order."""
    forks: PVector[ForkEvent] = _EMPTY
    """`ForkEvent`s seen (the roots this conversation was forked from)."""


def initial(conversation_id: str) -> ViewState:
    """The view of a conversation before its first event."""
    return ViewState(conversation_id=conversation_id)


def fold(state: ViewState, event: Event) -> ViewState:
    """Fold one event; a redelivery (known id) returns `state` unchanged.

    Raises:
        SequenceGapError: seq > last seq + 1.
        SequenceConflictError: seq ≤ last seq, but the id is not the one folded at that seq.
        ConversationMismatchError: the event belongs to another conversation.
        TenantMismatchError: the event names another tenant than the conversation's first event.
        UnknownEventError: the parent or the new active leaf is not a node of this tree.
    """
    owner, known = state.tenant_id, state.events
    # The common case of `admit` (the next seq, this conversation, its owner's tenant) inline.
    if (
        event.seq != state.last_seq + 1
        or event.conversation_id != state.conversation_id
        or (owner is not None and event.tenant_id != owner)
    ):
        if not admit(state.conversation_id, owner, state.last_seq, event, seen=known, known=known):
            return state
        if event.seq == ANNOTATION_SEQ:
            return _next(state, event)
    if event.id in known:
        return state
    if is_plain_append(event, state.active_leaf):
        return _tail_appended(state, event)
    return _placed(state, event)


def is_plain_append(event: Event, active_leaf: str | None) -> bool:
    """True if `event`, the next chain event, only extends the active branch by itself.

    That is an event parented on the active leaf (or the first root, when there is no leaf yet)
    that is not a branch switch, a fork or a condensation. Nearly every event is one, which the
    view folds without a walk or a rebuild, and its tip (`view_tip`) without the view.
    """
    # Kind strings, not isinstance: pydantic's metaclass makes isinstance cost ~0.25 µs.
    return event.parent_id == active_leaf and event.kind not in _OFF_TAIL_KINDS


def _placed(state: ViewState, event: Event) -> ViewState:
    """Fold a chain event that is not a plain append (switch, fork, condensation, new branch)."""
    parent = event.parent_id
    match event:
        case ActiveLeafChangedEvent(leaf_event_id=leaf):
            _require_node(state, leaf, event, "leaf_event_id")
            if leaf == state.active_leaf:
                return _next(state, event)
            return _next(state, event, leaf, _walk(state.events, leaf))
        case ForkEvent():
            return _next(state, event, event.id, [event])
        case _ if parent is None:
            if state.active_leaf is None:
                return _next(state, event, event.id, [event])
            return _next(state, event)
        case CondensationEvent() if parent is not None and parent == state.active_leaf:
            # Only the visible branch is rewritten, not the whole path: O(|visible|).
            visible = pvector(apply_condensation(state.visible, event))
            return _next(state, event, event.id, state.path.append(event), visible)
        case _:
            _require_node(state, parent, event, "parent_id")
            return _next(state, event, event.id, [*_walk(state.events, parent), event])


def fold_all(state: ViewState, events: Iterable[Event]) -> ViewState:
    """Fold events in order; equal to folding them one by one, ~2x faster on long runs.

    Runs of plain tail appends (the common case) go into the persistent structures in one
    mutation each instead of one new version per event.
    """
    run: list[Event] = []
    run_ids: set[str] = set()
    leaf, last_seq = state.active_leaf, state.last_seq
    for event in events:
        if (
            event.seq == last_seq + 1
            and event.conversation_id == state.conversation_id
            and event.tenant_id == state.tenant_id
            and is_plain_append(event, leaf)
            and event.id not in state.events
            and event.id not in run_ids
        ):
            run.append(event)
            run_ids.add(event.id)
            leaf, last_seq = event.id, event.seq
            continue
        state = fold(_tail_extended(state, run), event)
        run, run_ids = [], set()
        leaf, last_seq = state.active_leaf, state.last_seq
    return _tail_extended(state, run)


def active_branch(state: ViewState) -> tuple[Event, ...]:
    """The events the agent sees: root-first path to the active leaf, condensations applied.

    Each `CondensationEvent` on the branch, in order, removes the items it names from what
    was visible before it (events, or earlier summaries); one with a summary stands in place
    of the first item it removed (or at its own place when none was visible), one without a
    summary is not shown. Condensations on other branches do not apply.
    """
    return tuple(state.visible.tolist())


def path_to_root(state: ViewState, leaf_id: str) -> tuple[Event, ...]:
    """Root-first path from the root to `leaf_id`, condensations not applied.

    Raises:
        UnknownEventError: `leaf_id` was never folded into this view.
    """
    if leaf_id == state.active_leaf:
        return tuple(state.path.tolist())
    if leaf_id not in state.events:
        raise UnknownEventError(f"conversation {state.conversation_id}: no event {leaf_id} in the view")
    return tuple(_walk(state.events, leaf_id))


def node_at_seq(state: ViewState, seq: int) -> Event:
    """The tree node recorded at `seq`: where a branch may start or a fork begin after.

    Raises:
        UnknownEventError: no event has that seq (below 1, beyond the log, or not in this view,
            e.g. off the active branch of a view restored from a snapshot), or the event there is
            a branch switch, which is no node of the tree.
    """
    cid, last = state.conversation_id, state.last_seq
    if seq < 1 or seq > last:
        raise UnknownEventError(f"conversation {cid} has events #1 to #{last}: there is no event #{seq}")
    found = next((e for e in reversed(state.log) if e.seq == seq), None)
    if found is None:
        raise UnknownEventError(
            f"conversation {cid}: event #{seq} is not in this view (off its active branch before the "
            "last snapshot); branch from an event of the active branch"
        )
    if isinstance(found, ActiveLeafChangedEvent):
        raise UnknownEventError(
            f"conversation {cid}: event #{seq} is a branch switch, not an event a branch can start from"
        )
    return found


def view_as_of(
    events: Iterable[Event | tuple[int, Event]],
    *,
    conversation_id: str | None = None,
    offset: int | None = None,
    at: datetime | None = None,
) -> ViewState:
    """The view built from the events up to `offset` and/or `at`: what the agent saw then.

    `events` are in log order, either bare (their offset is their position in `events`) or
    as `(offset, event)` pairs. With `conversation_id`, other conversations' events are
    skipped; without it, all events must belong to one conversation. Folding stops at the
    first event of the conversation past a bound (offset > `offset` or timestamp > `at`).

    Raises:
        ProjectionError: no events and no `conversation_id`, or `at` is naive.
    """
    if at is not None and at.tzinfo is None:
        raise ProjectionError("view_as_of: `at` must be timezone-aware (UTC)")
    state = None if conversation_id is None else initial(conversation_id)
    for position, item in enumerate(events):
        event_offset, event = item if isinstance(item, tuple) else (position, item)
        if conversation_id is not None and event.conversation_id != conversation_id:
            continue
        if (offset is not None and event_offset > offset) or (at is not None and event.timestamp > at):
            break
        state = fold(state or initial(event.conversation_id), event)
    if state is None:
        raise ProjectionError("view_as_of: no events and no conversation_id to build a view for")
    return state


def digest(state: ViewState) -> str:
    """A stable hex digest of the view (last seq, active leaf, active branch) for audit."""
    ids = "\n".join(e.id for e in state.visible)
    return branch_digest(state.last_seq, state.active_leaf, ids, len(state.visible))


def branch_digest(last_seq: int, active_leaf: str | None, branch_ids: str, branch_length: int) -> str:
    """`digest` from the active branch's ids joined by newlines (callers may keep that text)."""
    head = f"{last_seq}\n{active_leaf or ''}"
    text = f"{head}\n{branch_ids}" if branch_length else head
    return hashlib.sha256(text.encode()).hexdigest()


def _require_node(state: ViewState, event_id: str, event: Event, field_name: str) -> None:
    target = state.events.get(event_id)
    if target is None or target.seq == ANNOTATION_SEQ or isinstance(target, ActiveLeafChangedEvent):
        what = "never folded" if target is None else f"not a tree node (kind {target.kind})"
        raise UnknownEventError(
            f"conversation {state.conversation_id}: event {event.id} (seq {event.seq}, kind "
            f"{event.kind}) has {field_name}={event_id}, which is {what}"
        )


def _next(
    state: ViewState,
    event: Event,
    leaf: str | None = None,
    path: Sequence[Event] | None = None,
    visible: PVector[Event] | None = None,
) -> ViewState:
    """`state` with `event` recorded and, when `leaf` is given, the active leaf moved there.

    Without `visible`, the branch is rebuilt from `path` (a switch, a fork, a new branch).
    """
    if leaf is None or path is None:
        leaf, path_vector, visible = state.active_leaf, state.path, state.visible
    else:
        path_vector = path if isinstance(path, PVector) else pvector(path)
        if visible is None:
            has_condensation = any(isinstance(e, CondensationEvent) for e in path)
            visible = pvector(condense(path)) if has_condensation else path_vector
    is_condensation = isinstance(event, CondensationEvent)
    return ViewState(
        state.conversation_id,
        state.tenant_id or event.tenant_id,
        max(state.last_seq, event.seq),
        state.events.set(event.id, event),
        state.log.append(event),
        leaf,
        path_vector,
        visible,
        state.condensations.append(event.id) if is_condensation else state.condensations,
        state.forks.append(event) if isinstance(event, ForkEvent) else state.forks,
    )


def _tail_appended(state: ViewState, event: Event) -> ViewState:
    """The hot path: a plain chain event whose parent is the active leaf (no walk, no rebuild)."""
    path = state.path.append(event)
    # Without a condensation on the branch the branch is the path: share the vector.
    visible = path if state.visible is state.path else state.visible.append(event)
    return ViewState(
        state.conversation_id,
        state.tenant_id or event.tenant_id,
        event.seq,
        state.events.set(event.id, event),
        state.log.append(event),
        event.id,
        path,
        visible,
        state.condensations,
        state.forks,
    )


def _tail_extended(state: ViewState, run: list[Event]) -> ViewState:
    """`state` after a run of plain tail appends (checked by the caller), in one mutation."""
    if not run:
        return state
    with state.events.mutate() as events:
        for event in run:
            events.set(event.id, event)
        mapping = events.finish()
    path = state.path.extend(run)
    return ViewState(
        state.conversation_id,
        state.tenant_id or run[0].tenant_id,
        run[-1].seq,
        mapping,
        state.log.extend(run),
        run[-1].id,
        path,
        path if state.visible is state.path else state.visible.extend(run),
        state.condensations,
        state.forks,
    )


def _walk(events: Map[str, Event], leaf_id: str) -> list[Event]:
    path: list[Event] = []
    node = events.get(leaf_id)
    while node is not None:
        path.append(node)
        if isinstance(node, ForkEvent) or node.parent_id is None:
            break
        node = events.get(node.parent_id)
    path.reverse()
    return path
