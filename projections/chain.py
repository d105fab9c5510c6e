"""A conversation's chain as the log decided it: its owner, last seq and the id at that seq (pure).

The per-conversation rules of `_sequence` as a fold of their own, for the projections whose
state is not a conversation's (the index keeps a row per event, the effects one per operation):
they fold each event into its conversation's `Chain` first and fold only what it admits, so
every projection refuses another tenant's event and a second event at a seq the log already gave.

A gap is admitted (the chain resumes at the event's seq): neither the index nor the effects fold
needs an earlier event to fold a later one; the folds that do refuse it (in `consume all`, for
all of them), as before these checks.
"""

from __future__ import annotations

from collections.abc import Container
from typing import NamedTuple

from convdb.projections._sequence import ANNOTATION_SEQ, admit, check_member
from convdb.schemas.events import Event


class Chain(NamedTuple):
    """What the log fixed of one conversation so far (immutable)."""

    conversation_id: str
    tenant_id: str | None = None
    """Tenant of its first event (None before it)."""
    last_seq: int = 0
    last_id: str | None = None
    """Id of the event at `last_seq`."""


def initial(conversation_id: str) -> Chain:
    """The chain of a conversation before its first event."""
    return Chain(conversation_id)


def fold(state: Chain, event: Event, known: Container[str] | None = None) -> Chain | None:
    """`state` after `event`, or None when the event is a redelivery (fold nothing of it).

    An annotation (seq 0) is admitted with `state` unchanged: its redelivery is decided by id,
    by the caller. `known`: the ids already folded at seqs ≤ last seq, when the caller has them
    (else only the id at the last seq tells a redelivery from a conflict).

    Raises:
        ConversationMismatchError, TenantMismatchError, SequenceConflictError: see
            `_sequence.admit`.
    """
    conv, owner, last_seq, last_id = state
    if event.seq > last_seq + 1:
        check_member(conv, owner, event)
    elif not admit(conv, owner, last_seq, event, seen=(), last_id=last_id, known=known):
        return None
    if event.seq == ANNOTATION_SEQ:
        return state if owner is not None else state._replace(tenant_id=event.tenant_id)
    return Chain(conv, owner or event.tenant_id, event.seq, event.id)
