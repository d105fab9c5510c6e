"""The API's parameter and body types: the rules of `convdb.schemas.validation`, declared once for OpenAPI.

Every identifier the API takes (path, query, body) is one of these, so a control character, a
lone surrogate or 10k characters answer 400 before anything reads the store or writes a topic,
and the OpenAPI schema documents the limits (length, pattern) that schemathesis then explores.
Integers are bounded to what the stores hold (a signed 64-bit integer).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import HTTPException, Path, Query, Request
from pydantic import AfterValidator, BaseModel, Field

from convdb.schemas.validation import (
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


class Problem(BaseModel):
    """An error: what was wrong, and how to fix it when that is not obvious."""

    detail: str = Field(description="The message (quotes at most 80 characters of the input).")


_PROBLEMS = {
    400: "bad input: the message names the parameter or field and the rule",
    401: "missing or unknown API key (or receipt signature)",
    403: "authenticated, but not allowed to do this",
    404: "no such conversation or operation for this tenant (the same answer whether it exists or not)",
    409: "the operation is not in a state that allows this",
    413: "body too large",
    429: "too many failed authentications from this address; see Retry-After",
    503: "the broker did not acknowledge in time (or cannot tell now); retry",
}


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for these error status codes, each with the `Problem` body."""
    return {code: {"model": Problem, "description": _PROBLEMS[code]} for code in codes}


AUTHENTICATED = problems(400, 401, 429)
"""What every route behind `X-API-Key` may answer."""


_DECLARED: dict[int, frozenset[str]] = {}


def refuse_unknown_query(request: Request) -> None:
    """A dependency: 400 naming a query parameter the route does not declare (a typo such as
    `?kinds=` or a filter this route has not would otherwise be ignored, and the answer unfiltered)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    known = _DECLARED.get(id(route))
    if known is None:
        known = frozenset(_query_names(dependant))
        _DECLARED[id(route)] = known
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        shown = ", ".join(repr(name[:40]) for name in unknown[:5])
        allowed = ", ".join(sorted(known)) or "none"
        raise HTTPException(400, f"unknown query parameter {shown}; this route takes: {allowed}")


def _query_names(dependant: Any) -> set[str]:
    """The query parameter names a route's dependant and its sub-dependencies declare."""
    names = {field.alias for field in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names
