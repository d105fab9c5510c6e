"""Conversation titles as a "callback processor as data" (DESIGN §8, STYLE §3).

Per conversation a processor is `active` until a `TitleEvent` is folded, then `disabled`.
The first user message gives an immediate title (pure, no LLM). The titles service asks
`wants_llm_title` and makes the LLM call itself (an effect); the result goes into the log as
a `TitleEvent` with origin `llm`, which replaces the title and disables the processor. After
`max_attempts` failed calls (counted with `record_failed_attempt`, outside the log) the
service publishes a `TitleEvent` with origin `first_message` instead, which also disables
it. Either way the log holds the outcome, so a replay folds the same state with no LLM.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, NamedTuple

from convdb.projections._sequence import ANNOTATION_SEQ, admit
from convdb.projections._text import shorten
from convdb.schemas._types import TitleOrigin
from convdb.schemas.events import Event
from convdb.schemas.validation import clean_text

TITLE_LIMIT = 60
"""Longest title, in characters (ellipsis included)."""

MAX_ATTEMPTS = 3
"""Failed LLM calls after which the service keeps the first-message title."""

TitleStatus = Literal["active", "disabled"]
"""`active`: an LLM title may still come; `disabled`: the title is final."""


class TitleProcessor(NamedTuple):
    """The title processor of one conversation (immutable)."""

    conversation_id: str
    status: TitleStatus = "active"
    attempts: int = 0
    """Failed LLM calls so far; service-side bookkeeping, cleared when the processor disables."""
    title: str | None = None
    origin: TitleOrigin | None = None
    first_user_message: str | None = None
    last_seq: int = 0
    annotations: frozenset[str] = frozenset()
    """Ids of the annotations (seq 0 TitleEvents) folded, so a re-delivery changes nothing."""
    tenant_id: str | None = None
    """Tenant of the conversation's first event: an event naming another is refused."""
    last_id: str | None = None
    """Id of the event at `last_seq`: another id at that seq is a conflict, not a redelivery."""


def initial(conversation_id: str) -> TitleProcessor:
    """The processor of a conversation before its first event."""
    return TitleProcessor(conversation_id)


def fold(state: TitleProcessor, event: Event) -> TitleProcessor:
    """Fold one event; duplicates return `state` unchanged, other kinds only advance seq.

    Raises:
        SequenceGapError: seq > last seq + 1.
        SequenceConflictError: another event id at the last seq.
        ConversationMismatchError: the event belongs to another conversation.
        TenantMismatchError: the event names another tenant than the conversation's first event.
    """
    owner = state.tenant_id
    if not admit(
        state.conversation_id, owner, state.last_seq, event, seen=state.annotations, last_id=state.last_id
    ):
        return state
    if event.seq == ANNOTATION_SEQ:
        state = state._replace(annotations=state.annotations | {event.id})
    else:
        state = state._replace(last_seq=event.seq, last_id=event.id)
    if owner is None:
        state = state._replace(tenant_id=event.tenant_id)
    match event.kind:
        case "message" if event.source == "user" and event.role == "user":
            return _first_user_message(state, event.content)
        case "title":
            return state._replace(
                status="disabled",
                attempts=0,
                title=event.title,
                origin=event.origin,
            )
        case _:
            return state


def fold_all(state: TitleProcessor, events: Iterable[Event]) -> TitleProcessor:
    """Fold events in order; equal to folding them one by one."""
    for event in events:
        state = fold(state, event)
    return state


def first_message_title(content: str) -> str:
    """The immediate title of a message: its first non-blank line, whitespace collapsed, ≤ 60 chars."""
    first_line = next((line for line in content.splitlines() if line.strip()), "")
    return shorten(first_line, TITLE_LIMIT)


def wants_llm_title(state: TitleProcessor, llm_enabled: bool, max_attempts: int = MAX_ATTEMPTS) -> bool:
    """Whether the service should call the LLM for a title now.

    Ask only when caught up with the log (not while replaying): a `TitleEvent` further on
    would make the call redundant.
    """
    return (
        llm_enabled
        and state.status == "active"
        and state.first_user_message is not None
        and state.attempts < max_attempts
    )


def record_failed_attempt(state: TitleProcessor) -> TitleProcessor:
    """The processor after one failed LLM call."""
    return state._replace(attempts=state.attempts + 1)


def gives_up(state: TitleProcessor, max_attempts: int = MAX_ATTEMPTS) -> bool:
    """Whether the service should now publish a `TitleEvent(origin="first_message")` to disable."""
    return state.status == "active" and state.title is not None and state.attempts >= max_attempts


def title_prompt(state: TitleProcessor) -> str:
    """The LLM prompt for a title (the service passes it to the model)."""
    return (
        f"Write a short title (at most {TITLE_LIMIT} characters, no quotes) for a conversation "
        f"that starts with this user message:\n\n{state.first_user_message or ''}"
    )


def clean_llm_title(text: str) -> str:
    """An LLM's answer made into a title: first line, quotes stripped, ≤ 60 chars, no NUL."""
    first_line = next((line for line in clean_text(text).splitlines() if line.strip()), "")
    return shorten(first_line.strip().strip("\"'`“”"), TITLE_LIMIT)


def _first_user_message(state: TitleProcessor, content: str) -> TitleProcessor:
    if state.first_user_message is not None or not content.strip():
        return state
    if state.status == "disabled":
        return state._replace(first_user_message=content)
    return state._replace(
        first_user_message=content, title=first_message_title(content), origin="first_message"
    )
