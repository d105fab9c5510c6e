"""The index projection: rows, search queries and keyset cursors."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Literal, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from convdb.projections.errors import CursorError, QueryError
from convdb.projections.index import (
    Cursor,
    EventKind,
    IndexRow,
    SearchQuery,
    decode_cursor,
    describe,
    encode_cursor,
    index_row,
    micros,
)
from convdb.schemas.events import EVENT_KINDS, EVENT_TYPES, Event, EventEnvelope
from tests.strategies import interleaved_conversations

EVENT = TypeAdapter(Event)


def key(row: IndexRow | Cursor) -> tuple[datetime, str, int, str]:
    return (row.timestamp, row.conversation_id, row.seq, row.event_id)


def test_event_kinds_match_the_schema() -> None:
    assert set(get_args(EventKind)) == {t.model_fields["kind"].default for t in EVENT_TYPES}
    assert EVENT_KINDS == tuple(t.model_fields["kind"].default for t in EVENT_TYPES)


class NoteEvent(EventEnvelope):
    """An event type the index has no description for (as a newly added one)."""

    text: str
    pinned: bool = False
    kind: Literal["note"] = "note"


def test_a_kind_without_a_description_is_described_by_its_fields() -> None:
    note = NoteEvent(
        id="n1", conversation_id="c", tenant_id="t", seq=1, timestamp=datetime(2026, 1, 1, tzinfo=UTC),
        source="user", text="remember\nthis",
    )  # fmt: skip
    assert describe(note) == "note: text=remember\nthis, pinned=False"  # type: ignore[arg-type]
    assert index_row(note).text == "note: text=remember this, pinned=False"  # type: ignore[arg-type]


@given(interleaved_conversations())
def test_rows_mirror_events(events: list[Event]) -> None:
    """Each row carries the event's coordinates, a one-line text and a payload that round-trips."""
    for event in events:
        row = index_row(event)
        assert (row.conversation_id, row.seq, row.event_id, row.kind) == (
            event.conversation_id,
            event.seq,
            event.id,
            event.kind,
        )
        assert (row.tenant_id, row.source, row.timestamp, row.parent_id) == (
            event.tenant_id,
            event.source,
            event.timestamp,
            event.parent_id,
        )
        assert len(row.text) <= 160 and "\n" not in row.text and row.text
        assert EVENT.validate_python(json.loads(json.dumps(row.payload))) == event


@given(interleaved_conversations(), st.integers(1, 7), st.data())
def test_keyset_pages_cover_everything_once(events: list[Event], limit: int, data: st.DataObject) -> None:
    """Paging with cursors (rows strictly after the cursor's key) returns every match once, in order."""
    rows = sorted((index_row(e) for e in events), key=key)
    tenant = data.draw(st.sampled_from(sorted({r.tenant_id for r in rows})))
    matching = [r for r in rows if r.tenant_id == tenant]
    pages: list[IndexRow] = []
    cursor: str | None = None
    while True:
        query = SearchQuery(tenant_id=tenant, limit=limit, cursor=cursor)
        after = query.after
        page = [r for r in matching if after is None or key(r) > key(after)][: query.limit]
        pages.extend(page)
        if len(page) < limit:
            break
        cursor = encode_cursor(page[-1])
    assert [r.event_id for r in pages] == [r.event_id for r in matching]


@given(
    st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)),
    st.text(min_size=1),
    st.integers(0, 2**63 - 1),
    st.text(min_size=1),
)
def test_cursor_round_trips(moment: datetime, conversation_id: str, seq: int, event_id: str) -> None:
    """decode(encode(position)) == position, to the microsecond."""
    position = Cursor(moment, conversation_id, seq, event_id)
    decoded = decode_cursor(encode_cursor(position))
    assert decoded == position
    assert decoded.timestamp_us == micros(moment)


@given(st.text())
def test_any_text_is_a_cursor_or_a_cursor_error(text: str) -> None:
    """Garbage never escapes as another exception type."""
    try:
        decode_cursor(text)
    except CursorError as exc:
        assert "cursor" in str(exc)


@pytest.mark.parametrize(
    "cursor",
    [
        "not base64!!",
        "bm90IGpzb24",  # "not json"
        "WzEsMiwzXQ",  # [1,2,3]
        "WzIsMCwiYyIsMSwiZSJd",  # version 2
        "WzEsIngiLCJjIiwxLCJlIl0",  # timestamp is a string
        "WzEsOTk5OTk5OTk5OTk5OTk5OTk5LCJjIiwxLCJlIl0",  # timestamp out of range
    ],
)
def test_bad_cursor_is_a_clear_error(cursor: str) -> None:
    with pytest.raises(CursorError, match="bad search filter `cursor`"):
        decode_cursor(cursor)
    with pytest.raises(QueryError, match="pass back a page's cursor unchanged"):
        SearchQuery(tenant_id="t", cursor=cursor)


T = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"tenant_id": ""}, "`tenant_id`"),
        ({"tenant_id": "t", "limit": 0}, "`limit`: Input should be greater than or equal to 1"),
        ({"tenant_id": "t", "limit": 501}, "`limit`: Input should be less than or equal to 500"),
        ({"tenant_id": "t", "limit": "many"}, "`limit`"),
        ({"tenant_id": "t", "kinds": ["message", "mesage"]}, "`kinds.1`: .*got 'mesage'"),
        ({"tenant_id": "t", "sources": ["robot"]}, "`sources.0`"),
        ({"tenant_id": "t", "since": T, "until": T}, "`since` .* must be before `until`"),
        ({"tenant_id": "t", "since": datetime(2026, 1, 1)}, "`since`: .*timezone"),
        ({"tenant_id": "t", "kind": "message"}, "`kind`: unknown filter"),
        ({}, "`tenant_id`: Field required"),
    ],
)
def test_bad_filters_name_the_filter(filters: dict[str, object], message: str) -> None:
    with pytest.raises(QueryError, match=message):
        SearchQuery(**filters)


def test_query_defaults_and_immutability() -> None:
    query = SearchQuery(tenant_id="t", kinds=["message", "action"], until=T + timedelta(days=1))
    assert query.limit == 50 and query.kinds == ("message", "action") and query.after is None
    with pytest.raises(Exception, match="frozen"):
        query.limit = 10  # type: ignore[misc]


def _shorten_reference(text: str, limit: int) -> str:
    """The plain definition: collapse all of `text`, then cut."""
    collapsed = " ".join(text.split())
    if len(collapsed) <= limit:
        return collapsed
    cut = collapsed[: limit - 1]
    space = cut.rfind(" ")
    if collapsed[limit - 1] != " " and space >= (limit * 2) // 3:
        cut = cut[:space]
    return cut.rstrip() + "…"


@given(
    st.lists(st.sampled_from(["a", "bc", "word", "x" * 30, " ", "  ", "\n", "\t ", "é"]), max_size=400),
    st.integers(min_value=2, max_value=60),
)
def test_shorten_of_a_prefix_equals_shortening_everything(parts: list[str], limit: int) -> None:
    """`shorten` collapses only a prefix of long texts; the result is the plain definition's."""
    from convdb.projections._text import shorten

    text = "".join(parts)
    assert shorten(text, limit) == _shorten_reference(text, limit)


@given(
    st.lists(
        st.sampled_from(
            ["ls", "-la", "Agent", "4096", "file.txt", "x_y", "w" * 120, "\n", " ", "é", "日本", "ⅻ"]
        )
        | st.text(max_size=8),
        max_size=60,
    )
)
def test_search_body_is_the_distinct_terms_of_the_description(parts: list[str]) -> None:
    """The indexed body is each word of `terms` once, in first-occurrence order, on the ASCII fast
    path (a byte translation) as on the regular expression's: the stores find the same events."""
    from convdb.projections.index import BODY_LIMIT, search_body, terms
    from convdb.schemas import MessageEvent

    content = "".join(parts)
    event = MessageEvent(
        id="e", conversation_id="c", tenant_id="t", seq=1, timestamp=datetime(2025, 1, 1, tzinfo=UTC),
        source="user", role="user", content=content,
    )  # fmt: skip
    words = terms(describe(event)[:BODY_LIMIT])
    assert search_body(event) == " ".join(dict.fromkeys(words))
    assert set(search_body(event).split(" ")) - {""} == set(words)


@given(
    st.lists(
        st.sampled_from(["ls -la", "drwxr-xr-x 2 agent 4096 a.txt", "", "  ", "x" * 120, "é ok", "a\tb"])
        | st.text(alphabet="ab_ \n\r", max_size=6),
        max_size=40,
    )
)
def test_search_body_of_repeated_lines_is_the_distinct_terms(lines: list[str]) -> None:
    """A tool's output repeating whole lines (which `search_body` splits once each) is indexed by the
    same words, in the same order, as the plain definition finds."""
    from convdb.projections.index import BODY_LIMIT, search_body, terms
    from convdb.schemas import ObservationEvent

    event = ObservationEvent(
        id="e", conversation_id="c", tenant_id="t", seq=1, timestamp=datetime(2025, 1, 1, tzinfo=UTC),
        source="environment", action_id="a", tool_name="bash", tool_call_id="k", content="\n".join(lines),
    )  # fmt: skip
    assert search_body(event) == " ".join(dict.fromkeys(terms(describe(event)[:BODY_LIMIT])))
