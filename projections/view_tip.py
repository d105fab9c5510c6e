"""The tip of a view: what its stored row needs, O(1) in the conversation's length (pure).

Nearly every event a conversation receives is a plain tail append: the next seq, parented on
the active leaf, not a switch, fork or condensation. Such a run moves the view in a way its
tip alone determines (the leaf, the counts), so a store that keeps the log in a table can
fold it without the conversation's full `ViewState` in memory; anything else needs the full
state (`view.fold_all`). `extend_tip` says which case a run is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from convdb.projections._sequence import ANNOTATION_SEQ
from convdb.projections.view import ViewState, is_plain_append
from convdb.schemas.events import Event


class Tip(NamedTuple):
    """A view's figures that do not grow with the conversation."""

    conversation_id: str
    tenant_id: str | None = None
    last_seq: int = 0
    events: int = 0
    """Events folded: the length of `ViewState.log`."""
    active_leaf: str | None = None
    branch_length: int = 0
    """Length of the active branch (`ViewState.visible`)."""


def tip(state: ViewState) -> Tip:
    """The tip of a full view."""
    return Tip(
        state.conversation_id,
        state.tenant_id,
        state.last_seq,
        len(state.log),
        state.active_leaf,
        len(state.visible),
    )


def extend_tip(start: Tip, events: Sequence[Event]) -> Tip | None:
    """`tip(view.fold_all(state, events))` for any `state` whose tip is `start`, or None.

    None unless every event is either the next chain event and a plain append
    (`view.is_plain_append`) or an annotation (seq 0), all of this conversation and of its tenant
    (the first event's): then the caller folds the full state, which refuses what the log does
    not allow (`view.fold`).
    Precondition, which a tip cannot check in general: no event id is already in the view (ids
    are UUIDs from one writer). An id repeated within `events`, or equal to the active leaf's
    (a retried event given the next seq), is checked here.
    """
    conv, tenant, last_seq, count, leaf, length = start
    seen: set[str] = set() if leaf is None else {leaf}
    for event in events:
        event_id, seq = event.id, event.seq
        if event.conversation_id != conv or event_id in seen:
            return None
        if tenant is not None and event.tenant_id != tenant:
            return None
        seen.add(event_id)
        if seq == last_seq + 1 and is_plain_append(event, leaf):
            last_seq, leaf, count, length = seq, event_id, count + 1, length + 1
        elif seq == ANNOTATION_SEQ:
            count += 1
        else:
            return None
        tenant = tenant or event.tenant_id
    return Tip(conv, tenant, last_seq, count, leaf, length)
