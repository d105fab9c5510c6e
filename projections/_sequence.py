"""The per-conversation seq rule every projection shares (DESIGN §5, STYLE §2)."""

from __future__ import annotations

from projections.errors import ConversationMismatchError, SequenceGapError
from schemas.events import Event

ANNOTATION_SEQ = 0
"""seq of an annotation outside the chain (a TitleEvent): not ordered, deduplicated by id."""


def is_next(conversation_id: str, last_seq: int, event: Event) -> bool:
    """True if `event` is the next one of the chain, False if it is a duplicate (seq ≤ last).

    Raises:
        ConversationMismatchError: the event belongs to another conversation.
        SequenceGapError: seq > last + 1, so events are missing before it.
    """
    if event.conversation_id != conversation_id:
        raise ConversationMismatchError(
            f"event {event.id} (kind {event.kind}, seq {event.seq}) belongs to conversation "
            f"{event.conversation_id}, not {conversation_id}"
        )
    if event.seq > last_seq + 1:
        raise SequenceGapError(
            f"conversation {conversation_id}: seq {event.seq} after {last_seq} "
            f"(event {event.id}, kind {event.kind}); "
            f"seq {last_seq + 1}..{event.seq - 1} are missing: fold from an earlier offset"
        )
    return event.seq == last_seq + 1
