"""Full-text search, one contract over SQLite (FTS5) and PostgreSQL (tsvector + GIN).

Both stores must return, for every query, exactly the events the pure rule says (every word of
the query among `terms(describe(event))`, the tenant's only, in keyset order), page by page, with
redeliveries and batch splits, and the same pages as each other.
"""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa

from convdb.consumers.base import ConsumedRecord
from convdb.consumers.index import IndexConsumer, search
from convdb.consumers.store import ensure_projections, open_engine
from convdb.projections.errors import QueryError
from convdb.projections.index import BODY_LIMIT, SearchQuery, describe, query_terms, snippet, terms
from convdb.schemas import ActionEvent, AgentErrorEvent, MessageEvent, ObservationEvent
from convdb.schemas.events import Event
from tests.consumers.builders import T0

VOCABULARY = [
    "alpha", "Bravo", "charlie", "délta", "ÉCHO", "straße", "日本語", "x9z", "42",
    "ⅻ", "zulu", "kilo", "\u202eevil", "<script>alert(1)</script>", "w" * 150,
]  # fmt: skip
"""Words the generated texts draw from: accents, case, CJK, digits, RTL override, markup, a long word."""

QUERIES = [
    "alpha", "bravo", "délta", "delta", "écho", "ECHO", "straße", "日本語", "x9z", "42", "evil",
    "script", "alert 1", "alpha bravo", "zulu kilo charlie", "w" * 150, "w" * 100, "nothinghere",
    "ALPHA   zulu!", "shell", "boom",
]  # fmt: skip


FILTERS: list[dict] = [
    {"tenant_id": "t1"},
    {"tenant_id": "t2"},
    {"tenant_id": "t1", "conversation_id": "conv-1"},
    {"tenant_id": "t1", "kinds": ("observation", "message")},
]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 6)))


def generated(seed: int) -> list[Event]:
    """Three conversations of two tenants, messages, actions, observations and errors."""
    rng = random.Random(seed)
    events: list[Event] = []
    for c, tenant in enumerate(("t1", "t1", "t2")):
        conv, parent = f"conv-{c}", None
        for seq in range(1, 41):
            common = {
                "id": str(uuid.UUID(int=rng.getrandbits(128))),
                "conversation_id": conv,
                "tenant_id": tenant,
                "seq": seq,
                "timestamp": T0 + timedelta(milliseconds=rng.randint(0, 50) + seq * 10),
                "parent_id": parent,
            }
            match seq % 4:
                case 1:
                    event: Event = MessageEvent(**common, source="user", role="user", content=_text(rng))
                case 2:
                    event = ActionEvent(
                        **common, source="agent", tool_name="shell", tool_call_id=f"c{seq}",
                        arguments=f'{{"cmd": "{_text(rng)}"}}', thought=_text(rng),
                        llm_response_id=f"r{seq}", operation_id=f"{conv}/{common['id']}",
                        intent_hash="0" * 64, effect_class="read_only",
                    )  # fmt: skip
                case 3:
                    event = ObservationEvent(
                        **common, source="environment", tool_name="shell", tool_call_id=f"c{seq - 1}",
                        action_id=events[-1].id, content=_text(rng), is_error=False,
                    )  # fmt: skip
                case _:
                    event = AgentErrorEvent(**common, source="agent", error=f"boom {_text(rng)}")
            events.append(event)
            parent = common["id"]
    return events


def expected(events: list[Event], query: SearchQuery) -> list[str]:
    """The ids the pure rule finds, in keyset order."""
    words = set(query.words)
    hits = [
        e
        for e in events
        if e.tenant_id == query.tenant_id
        and (query.conversation_id is None or e.conversation_id == query.conversation_id)
        and (not query.kinds or e.kind in query.kinds)
        and words <= set(terms(describe(e)[:BODY_LIMIT]))
    ]
    hits.sort(key=lambda e: (e.timestamp, e.conversation_id, e.seq, e.id))
    return [e.id for e in hits]


def all_pages(conn: sa.Connection, **filters: object) -> list[dict]:
    rows: list[dict] = []
    cursor = None
    while True:
        page = search(conn, SearchQuery(**filters, cursor=cursor))
        rows.extend(page.rows)
        if page.cursor is None:
            return rows
        assert len(page.rows) == filters["limit"]
        cursor = page.cursor


@pytest.mark.postgres
def test_both_stores_find_what_the_pure_rule_finds(sqlite_url: str, pg_url: str) -> None:
    events = generated(7)
    records = [ConsumedRecord("ev", 0, i, 0, e.conversation_id, e) for i, e in enumerate(events)]
    # Batches of 13 with every third batch delivered twice (a redelivery must not double a hit).
    batches = [records[i : i + 13] for i in range(0, len(records), 13)]
    batches = [b for i, b in enumerate(batches) for _ in range(2 if i % 3 == 0 else 1)]
    answers: dict[str, list[list[str]]] = {}
    for url in (sqlite_url, pg_url):
        engine = open_engine(url)
        projector = IndexConsumer()
        ensure_projections(engine, [projector])
        for batch in batches:
            with engine.begin() as conn:
                projector.apply(conn, batch)
        found = []
        with engine.connect() as conn:
            for q in QUERIES:
                for filters in FILTERS:
                    query = SearchQuery(q=q, limit=7, **filters)
                    rows = all_pages(conn, q=q, limit=7, **filters)
                    ids = [r["event_id"] for r in rows]
                    assert ids == expected(events, query), (url.split(":")[0], q, filters)
                    assert all(r["snippet"].highlights for r in rows), (q, filters)
                    found.append(ids)
        engine.dispose()
        answers[url] = found
    sqlite_found, pg_found = answers.values()
    assert sqlite_found == pg_found
    assert sum(map(len, sqlite_found)) > 100  # the queries do find things (not a vacuous agreement)
    assert any(not ids for ids in sqlite_found)  # and some find nothing


def test_query_words_are_checked() -> None:
    assert query_terms("Alpha, alpha; BRAVO!") == ("alpha", "bravo")
    for bad in ("", "  !!! ", " ".join(f"w{i}" for i in range(17))):
        with pytest.raises(QueryError, match="`q`"):
            SearchQuery(tenant_id="t", q=bad)
    with pytest.raises(QueryError, match="q"):
        SearchQuery(tenant_id="t", q="x" * 501)


def test_snippet_marks_each_word_around_the_first_hit() -> None:
    text = "lorem " * 100 + "the NEEDLE is here, needle again " + "ipsum " * 100
    cut = snippet(text, ("needle",))
    assert cut.text.startswith("…") and cut.text.endswith("…") and len(cut.text) <= 202
    assert [cut.text[a:b] for a, b in cut.highlights] == ["NEEDLE", "needle"]
    whole = snippet("short needle", ("needle",))
    assert whole == ("short needle", ((6, 12),))
    assert snippet("no match at all", ("needle",)).highlights == ()


V8_TABLES = {
    "sqlite": (
        "CREATE TABLE index_text (doc INTEGER PRIMARY KEY, body TEXT NOT NULL)",
        "CREATE VIRTUAL TABLE index_text_fts USING fts5(body, content='index_text', content_rowid='doc')",
        "CREATE TABLE index_events (tenant_id TEXT, event_id TEXT)",
    ),
    "postgresql": (
        "CREATE TABLE index_text (doc BIGINT PRIMARY KEY, body TEXT NOT NULL)",
        "CREATE INDEX index_text_words ON index_text USING gin (to_tsvector('simple'::regconfig, body))",
        "CREATE TABLE index_events (tenant_id TEXT, event_id TEXT)",
    ),
}
"""Index v8's layout, as far as v9 must remove it: its full-text table (and SQLite's FTS5 table over it)."""


@pytest.mark.postgres
def test_index_v8_is_dropped_and_rebuilt(sqlite_url: str, pg_url: str) -> None:
    """A store of index v8 (a second table of every event's words) is dropped on the version bump,
    its full-text table too, and the rebuilt index finds what the pure rule finds."""
    events = generated(3)
    records = [ConsumedRecord("ev", 0, i, 0, e.conversation_id, e) for i, e in enumerate(events)]
    for url in (sqlite_url, pg_url):
        engine = open_engine(url)
        with engine.begin() as conn:
            for ddl in V8_TABLES[conn.dialect.name]:
                conn.exec_driver_sql(ddl)
            conn.exec_driver_sql(
                "CREATE TABLE convdb_projections (name VARCHAR(100) PRIMARY KEY, version INT)"
            )
            conn.exec_driver_sql("INSERT INTO convdb_projections VALUES ('index', 8)")
        projector = IndexConsumer()
        assert ensure_projections(engine, [projector]) == ["index"]
        with engine.begin() as conn:
            assert not sa.inspect(conn).has_table("index_text")
            projector.apply(conn, records)
        with engine.connect() as conn:
            query = SearchQuery(tenant_id="t1", q="alpha", limit=500)
            assert [r["event_id"] for r in all_pages(conn, tenant_id="t1", q="alpha", limit=500)] == expected(
                events, query
            )
        engine.dispose()
