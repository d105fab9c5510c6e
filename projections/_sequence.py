"""The per-conversation rules every projection applies to an event before folding it (DESIGN §5,
§11, STYLE §2): it belongs to this conversation and to its owner's tenant, and its seq is the
next one, or a redelivery of an event already folded, never a gap nor a second event at a seq
the log already gave to another.
"""

from __future__ import annotations

from collections.abc import Container

from convdb.projections.errors import (
    ConversationMismatchError,
    SequenceConflictError,
    SequenceGapError,
    TenantMismatchError,
)
from convdb.projections.tenancy import refusal
from convdb.schemas.events import Event

ANNOTATION_SEQ = 0
"""seq of an annotation outside the chain (a TitleEvent): not ordered, deduplicated by id."""


def check_member(conversation_id: str, owner: str | None, event: Event) -> None:
    """Refuse an event of another conversation, or of another tenant than the conversation's owner.

    `owner` is the tenant of the first event folded (None before it).

    Raises:
        ConversationMismatchError: the event belongs to another conversation.
        TenantMismatchError: the event names another tenant than the conversation's.
    """
    if event.conversation_id != conversation_id:
        raise ConversationMismatchError(
            f"event {event.id} (kind {event.kind}, seq {event.seq}) belongs to conversation "
            f"{event.conversation_id}, not {conversation_id}"
        )
    if owner is not None and event.tenant_id != owner:
        reason = refusal(owner, event)
        if reason is not None:
            raise TenantMismatchError(f"event {event.id[:80]!r} (seq {event.seq}): {reason}")


def admit(
    conversation_id: str,
    owner: str | None,
    last_seq: int,
    event: Event,
    *,
    seen: Container[str],
    last_id: str | None = None,
    known: Container[str] | None = None,
) -> bool:
    """The prologue of every fold: True to fold `event`, False for a redelivery (fold nothing).

    An annotation (seq 0) is folded unless its id is in `seen` (the annotations folded so far);
    a chain event when it is the next one (`is_next`, with `last_id` and `known`). Folds inline
    the common case (the next seq, this conversation, its owner's tenant) before calling this.

    Raises:
        ConversationMismatchError, TenantMismatchError, SequenceGapError, SequenceConflictError:
            see `is_next`.
    """
    if event.seq == ANNOTATION_SEQ:
        check_member(conversation_id, owner, event)
        return event.id not in seen
    return is_next(conversation_id, last_seq, event, owner=owner, last_id=last_id, known=known)


def is_next(
    conversation_id: str,
    last_seq: int,
    event: Event,
    *,
    owner: str | None = None,
    last_id: str | None = None,
    known: Container[str] | None = None,
) -> bool:
    """True if `event` is the next one of the chain, False if it is a redelivery (seq ≤ last).

    Whether an event at a seq already folded is a redelivery or a conflict is decided by `known`
    (every id folded, for a projection that keeps them), else by `last_id` (the id at `last_seq`).
    A projection that keeps neither cannot tell, and treats it as a redelivery: in `consume all`
    one that keeps them (views, index) refuses the conflict for all.

    Raises:
        ConversationMismatchError, TenantMismatchError: see `check_member`.
        SequenceGapError: seq > last + 1, so events are missing before it.
        SequenceConflictError: the seq was folded with another event id.
    """
    check_member(conversation_id, owner, event)
    seq = event.seq
    if seq > last_seq + 1:
        raise SequenceGapError(
            f"conversation {conversation_id}: seq {seq} after {last_seq} "
            f"(event {event.id}, kind {event.kind}); "
            f"seq {last_seq + 1}..{seq - 1} are missing: fold from an earlier offset"
        )
    if seq == last_seq + 1:
        return True
    if seq < ANNOTATION_SEQ:
        raise SequenceConflictError(
            f"conversation {conversation_id}: event {event.id} (kind {event.kind}) has seq {seq}: "
            "no event may take a negative seq (chain events have 1, 2, ...; annotations 0)"
        )
    if known is not None:
        taken = event.id not in known
    else:
        taken = seq == last_seq and last_id is not None and event.id != last_id
    if taken:
        held = f" ({last_id})" if known is None else ""
        raise SequenceConflictError(
            f"conversation {conversation_id}: event {event.id} (kind {event.kind}) has seq {seq}, "
            f"which the log already gave to another event{held}: a second writer or a forged "
            f"record (last seq {last_seq})"
        )
    return False
