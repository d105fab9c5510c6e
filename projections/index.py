"""The event index: one display row per event, search queries and keyset cursors (DESIGN §8).

Pure: the store runs the SQL. The keyset order is (timestamp, conversation_id, seq) ascending,
with event_id as the last tie-break (annotations all have seq 0); a cursor is the position of
the last row of a page, and the next page is every row strictly after it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from convdb.projections._text import ELLIPSIS, shorten
from convdb.projections.errors import CursorError, QueryError
from convdb.schemas._types import EventSource
from convdb.schemas.events import Event, EventEnvelope, EventKind

TEXT_LIMIT = 160
"""Length of `IndexRow.text`, in characters."""

MAX_LIMIT = 500
"""Largest page a search may ask for."""

BODY_LIMIT = 20_000
"""Characters of an event's description that full-text search indexes (the rest is not found)."""
TERM_LIMIT = 100
"""Longest indexed word, in characters: a longer word is indexed (and looked for) by its first 100."""
MAX_TERMS = 16
"""Most words one full-text query may hold."""
MAX_Q = 500
"""Longest full-text query, in characters."""
SNIPPET_LIMIT = 200
"""Length of a search hit's snippet, in characters."""

_WORD = re.compile(r"[^\W_]+")
"""A word of full-text search: a run of letters and digits (anything else separates words)."""

_ASCII_WORDS = bytes(
    c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 else 32 for c in range(256)
)
"""Byte table of `_words`: ASCII letters lower-cased, digits kept, every other byte a space (`_WORD`'s
words of an ASCII text are its runs of ASCII letters and digits)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CURSOR_VERSION = 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class IndexRow(NamedTuple):
    """One event as a row of the index (`row._asdict()` gives the column mapping)."""

    tenant_id: str
    conversation_id: str
    seq: int
    event_id: str
    kind: str
    source: str
    timestamp: datetime
    parent_id: str | None
    text: str
    """A short one-line summary for display."""
    payload: dict[str, Any]
    """The whole event as a JSON-able dict (`model_dump(mode="json")`)."""


class Cursor(NamedTuple):
    """A keyset position: the sort key of the last row of a page."""

    timestamp: datetime
    conversation_id: str
    seq: int
    event_id: str

    @property
    def timestamp_us(self) -> int:
        """The timestamp as microseconds since the Unix epoch (as `timestamp-micros` stores it)."""
        return micros(self.timestamp)


def micros(moment: datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime (exact, no float rounding)."""
    return (moment - _EPOCH) // timedelta(microseconds=1)


def index_row(event: Event) -> IndexRow:
    """The index row of one event."""
    return IndexRow(
        event.tenant_id,
        event.conversation_id,
        event.seq,
        event.id,
        event.kind,
        event.source,
        event.timestamp,
        event.parent_id,
        shorten(describe(event), TEXT_LIMIT),
        event.model_dump(mode="json"),
    )


def describe(event: Event) -> str:
    """A human description of an event, before shortening (any kind, described or not)."""
    described = _DESCRIPTIONS.get(event.kind)
    if described is not None:
        return described(event)
    # A kind without a description of its own (a new event type): its fields, in schema order.
    fields = ", ".join(f"{k}={v}" for k, v in event.__dict__.items() if k not in _ENVELOPE and v is not None)
    return f"{event.kind}: {fields}"


def _usage(event: Any) -> str:
    cost = "unpriced" if event.cost is None else f"${event.cost:.4f}"
    return f"{event.model}: {event.prompt_tokens}+{event.completion_tokens} tokens, {cost}"


def _condensation(event: Any) -> str:
    forgot = f"forgot {len(event.forgotten_event_ids)} events"
    return forgot if event.summary is None else f"{forgot}: {event.summary}"


_ENVELOPE = frozenset(EventEnvelope.model_fields) | {"kind", "extension"}

# A dict on `kind` rather than `match` on classes: isinstance on pydantic models is slow.
_DESCRIPTIONS: dict[str, Callable[[Any], str]] = {
    "system_prompt": lambda e: f"system prompt: {e.content}",
    "message": lambda e: f"{e.role}: {e.content}",
    "action": lambda e: f"{e.tool_name}({e.arguments}) {e.thought}",
    "observation": lambda e: f"{e.tool_name} {'error' if e.is_error else 'ok'}: {e.content}",
    "agent_error": lambda e: f"error: {e.error}",
    "user_reject": lambda e: f"rejected {e.action_id}: {e.reason}",
    "condensation": _condensation,
    "pause": lambda e: f"paused: {e.reason}",
    "state_update": lambda e: f"{e.execution_status}: {e.reason}",
    "llm_usage": _usage,
    "fork": lambda e: f"forked from {e.source_conversation_id} at {e.source_event_id}",
    "active_leaf_changed": lambda e: f"switched branch to {e.leaf_event_id}",
    "title": lambda e: f"title ({e.origin}): {e.title}",
    "external": lambda e: f"{e.origin} {e.external_kind}",
}


def terms(text: str) -> list[str]:
    """The words full-text search sees in `text`: lower-cased, each cut at `TERM_LIMIT`, in order.

    Both stores are given these words (each once, `search_body`) joined by spaces (SQLite FTS5's
    unicode61 tokenizer and PostgreSQL's `simple` configuration then split and fold them alike), so
    they answer the same.
    """
    return [word[:TERM_LIMIT] for word in _WORD.findall(text.lower())]


def search_body(event: Event) -> str:
    """What full-text search indexes of an event: the distinct words of its description (message
    text, thought, tool name, arguments and result, error, reason), its first `BODY_LIMIT`
    characters, each once, in the order they first occur.

    Once is enough: a search finds the events holding every word of the query (no phrase, no
    ranking), and a tool's output repeats its words (the bench's 1 KB listing: 80 words, 9 distinct),
    which the store's word index would otherwise index at every place.
    """
    text = describe(event)[:BODY_LIMIT]
    if not text.isascii():
        return " ".join(dict.fromkeys(terms(text)))
    # `terms` by a byte translation (4x faster than the regular expression, whose share of the
    # sink's time was a fifth): an ASCII text's words are its runs of ASCII letters and digits.
    data = _distinct_lines(text.encode("ascii"))
    words = dict.fromkeys(data.translate(_ASCII_WORDS).split())
    if max(map(len, words), default=0) > TERM_LIMIT:  # cut after dropping repeats: fewer to measure
        words = dict.fromkeys(word[:TERM_LIMIT] for word in words)
    return b" ".join(words).decode("ascii")


def _distinct_lines(data: bytes) -> bytes:
    """`data` without the lines that repeat an earlier line (the same words, in the same order).

    No word spans a line break, so a repeated line adds no word the first copy did not: dropping
    it leaves the distinct words and their first-occurrence order unchanged. Tool output repeats
    whole lines (listings, logs, progress, blank lines): finding the words of the bench's 1 KB
    listing (20 copies of one line), the sink's largest Python cost after decoding, takes half the
    time; a text without a repeated line pays about a tenth more (the split into lines).
    """
    if data.count(b"\n") < 2:
        return data
    lines = data.split(b"\n")
    distinct = dict.fromkeys(lines)
    return data if len(distinct) == len(lines) else b"\n".join(distinct)


def query_terms(q: str) -> tuple[str, ...]:
    """The distinct words of a full-text query, in order; an event matches when it holds all of them.

    Raises:
        QueryError: the query holds no word, or more than `MAX_TERMS`.
    """
    words = tuple(dict.fromkeys(terms(q)))
    if not words:
        raise QueryError("bad search filter `q`: no word in it (letters or digits); give one or more words")
    if len(words) > MAX_TERMS:
        raise QueryError(f"bad search filter `q`: {len(words)} words, at most {MAX_TERMS}; use fewer words")
    return words


class Snippet(NamedTuple):
    """A part of a hit's text around its first match, and where the query's words are in it."""

    text: str
    highlights: tuple[tuple[int, int], ...]
    """(start, end) character offsets into `text`, in order, not overlapping."""


def snippet(text: str, words: tuple[str, ...], limit: int = SNIPPET_LIMIT) -> Snippet:
    """The part of `text` (whitespace collapsed) around the first of `words`, at most `limit`
    characters, with an ellipsis on each side that was cut, and the offsets of the words in it."""
    text = " ".join(text.split())
    wanted = set(words)
    found = [(m.start(), m.end()) for m in _WORD.finditer(text) if m.group().lower()[:TERM_LIMIT] in wanted]
    start = 0
    if found and len(text) > limit:
        start = max(0, min(found[0][0] - limit // 4, len(text) - limit))
    end = min(len(text), start + limit)
    head = ELLIPSIS if start > 0 else ""
    tail = ELLIPSIS if end < len(text) else ""
    shown = head + text[start:end] + tail
    shift = len(head) - start
    marks = tuple((a + shift, min(b, end) + shift) for a, b in found if a >= start and a < end)
    return Snippet(shown, marks)


def encode_cursor(row: IndexRow | Cursor) -> str:
    """The opaque cursor that resumes a search strictly after `row`."""
    key = [_CURSOR_VERSION, micros(row.timestamp), row.conversation_id, row.seq, row.event_id]
    text = json.dumps(key, separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(text: str) -> Cursor:
    """The keyset position in a cursor made by `encode_cursor`.

    Raises:
        CursorError: the text is not such a cursor (garbled, truncated or tampered).
    """
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        key = json.loads(raw.decode())
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise CursorError(_cursor_message(text, "it does not decode")) from exc
    shape = (int, int, str, int, str)
    if not isinstance(key, list) or len(key) != len(shape) or key[0] != _CURSOR_VERSION:
        raise CursorError(_cursor_message(text, "unknown layout or version"))
    if any(type(value) is not kind for value, kind in zip(key, shape, strict=True)):
        raise CursorError(_cursor_message(text, "a field has the wrong type"))
    if not all(_INT64_MIN <= value <= _INT64_MAX for value in (key[1], key[3])):
        raise CursorError(_cursor_message(text, "a number is out of range"))
    try:
        timestamp = _EPOCH + timedelta(microseconds=key[1])
    except OverflowError as exc:
        raise CursorError(_cursor_message(text, "timestamp out of range")) from exc
    return Cursor(timestamp, key[2], key[3], key[4])


def _cursor_message(text: str, reason: str) -> str:
    shown = text if len(text) <= 40 else text[:40] + "…"
    return f"bad search filter `cursor` {shown!r}: {reason}; pass back a page's cursor unchanged"


class SearchQuery(BaseModel):
    """A search over one tenant's events; construction raises `QueryError` on a bad filter.

    `since` is inclusive, `until` exclusive; empty `kinds`/`sources` mean "any".
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant_id: str = Field(min_length=1, description="Tenant whose events are searched.")
    conversation_id: str | None = Field(None, min_length=1, description="Only this conversation.")
    kinds: tuple[EventKind, ...] = Field((), description="Only these event kinds.")
    sources: tuple[EventSource, ...] = Field((), description="Only events from these sources.")
    since: AwareDatetime | None = Field(None, description="Only events at or after this time.")
    until: AwareDatetime | None = Field(None, description="Only events before this time.")
    limit: int = Field(50, ge=1, le=MAX_LIMIT, description="Rows per page.")
    cursor: str | None = Field(None, description="Resume after this position (from a previous page).")
    q: str | None = Field(
        None, max_length=MAX_Q, description="Only events whose text holds all these words (full-text)."
    )

    def __init__(self, **filters: Any) -> None:
        try:
            super().__init__(**filters)
        except ValidationError as exc:
            raise QueryError(_query_message(exc)) from exc

    @field_validator("cursor")
    @classmethod
    def _cursor_decodes(cls, value: str | None) -> str | None:
        if value is not None:
            decode_cursor(value)  # raises CursorError, which pydantic lets through
        return value

    @field_validator("q")
    @classmethod
    def _q_has_words(cls, value: str | None) -> str | None:
        if value is not None:
            query_terms(value)  # raises QueryError, which pydantic lets through
        return value

    @property
    def words(self) -> tuple[str, ...]:
        """The full-text query's words (empty without `q`)."""
        return () if self.q is None else query_terms(self.q)

    @model_validator(mode="after")
    def _range_is_ordered(self) -> SearchQuery:
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ValueError(
                f"`since` ({self.since.isoformat()}) must be before `until` ({self.until.isoformat()})"
            )
        return self

    @property
    def after(self) -> Cursor | None:
        """The keyset position to resume after, or None for the first page."""
        return None if self.cursor is None else decode_cursor(self.cursor)


def _query_message(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        what = error["msg"]
        if error["type"] == "extra_forbidden":
            what = "unknown filter"
        elif error["type"] == "literal_error":
            what = f"{what} (got {str(error['input'])[:40]!r})"
        problems.append(f"`{where}`: {what}" if where else what)
    return "bad search filter " + "; ".join(problems)
