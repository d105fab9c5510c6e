"""The API's parameter and body types: the rules of `schemas.validation`, declared once for OpenAPI.

Every identifier the API takes (path, query, body) is one of these, so a control character, a
lone surrogate or 10k characters answer 400 before anything reads the store or writes a topic,
and the OpenAPI schema documents the limits (length, pattern) that schemathesis then explores.
Integers are bounded to what the stores hold (a signed 64-bit integer).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import AfterValidator, Field

from schemas.validation import (
    CONVERSATION_ID_PATTERN,
    ID_PATTERN,
    MAX_ID,
    MAX_OPERATION_ID,
    check_conversation_id,
    check_id,
    check_operation_id,
    check_text,
)

MAX_INT64 = 2**63 - 1
"""Largest integer a query may carry (SQLite's and PostgreSQL's BIGINT)."""
MAX_MESSAGE = 100_000
"""Longest user message, in characters."""
MAX_NOTE = 2000
"""Longest note on a decision, in characters."""
MAX_CURSOR = 1000
"""Longest pagination cursor or `after` key (ours are far shorter)."""


def _text(value: str) -> str:
    return check_text(value, "text")


def _sender(value: str) -> str:
    return check_id(value, "sender")


ConversationIdPath = Annotated[
    str,
    Path(description="Conversation id.", max_length=MAX_ID, pattern=CONVERSATION_ID_PATTERN),
    AfterValidator(check_conversation_id),
]
"""A conversation id in a URL path."""

OperationIdPath = Annotated[
    str,
    Path(description="Operation id: '<conversation_id>/<action_id>'.", max_length=MAX_OPERATION_ID),
    AfterValidator(check_operation_id),
]
"""An operation id in a URL path."""

ConversationIdQuery = Annotated[
    str | None,
    Query(description="Only this conversation.", max_length=MAX_ID, pattern=CONVERSATION_ID_PATTERN),
    AfterValidator(lambda v: v if v is None else check_conversation_id(v)),
]
"""An optional conversation-id filter."""

KeysetQuery = Annotated[
    str | None,
    Query(description="The previous page's continuation key.", max_length=MAX_CURSOR, pattern=ID_PATTERN),
]
"""A keyset-page continuation (`after`, `cursor`)."""

OffsetQuery = Annotated[
    int | None, Query(ge=0, le=MAX_INT64, description="Only events up to this Kafka offset.")
]
"""A Kafka offset bound."""

LimitQuery = Annotated[int, Query(ge=1, le=500, description="Rows per page (1..500).")]
"""A page size."""

MessageText = Annotated[
    str, Field(min_length=1, max_length=MAX_MESSAGE, description="Message text."), AfterValidator(_text)
]
"""A user message."""

Sender = Annotated[
    str, Field(min_length=1, max_length=MAX_ID, description="Who sends it."), AfterValidator(_sender)
]
"""Who sent a message."""

Note = Annotated[
    str, Field(max_length=MAX_NOTE, description="Why (kept on the ledger)."), AfterValidator(_text)
]
"""Free text on a decision."""
