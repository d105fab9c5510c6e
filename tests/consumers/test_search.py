"""Keyset search does not scan: the plan uses the composite indexes, and page time is flat in N."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from convdb.consumers._rows import from_micros, payload_of
from convdb.consumers.index import IndexConsumer
from convdb.consumers.index.search import page_query, search
from convdb.consumers.index.tables import COLUMNS, events
from convdb.consumers.store import bulk_insert, ensure_projections, log_position, open_engine, write_payloads
from convdb.projections.index import Cursor, SearchQuery, encode_cursor
from convdb.schemas import MessageEvent

KINDS = ("message", "action", "observation", "llm_usage")
SOURCES = ("user", "agent", "environment", "agent")
T0_US = 1_750_000_000_000_000


def fill(engine: Engine, conversation_id: str, n: int, partition: int, tenant: str = "t") -> None:
    """n index rows of one conversation, 1 ms apart, kinds and sources rotating, and their payloads
    (at offsets 0..n-1 of `partition`)."""
    payload = payload_of(MessageEvent(
        id="m", conversation_id=conversation_id, tenant_id=tenant, seq=1, timestamp=from_micros(T0_US),
        source="user", role="user", content="x" * 200,
    ))  # fmt: skip
    rows = [
        (
            f"{conversation_id}-{i}",
            tenant,
            conversation_id,
            i + 1,
            KINDS[i % 4],
            SOURCES[i % 4],
            None,
            T0_US + i * 1000,
            partition,
            i,
            log_position(partition, i),
            None,
        )
        for i in range(n)
    ]
    with engine.begin() as conn:
        for start in range(0, n, 20000):
            bulk_insert(conn, events, COLUMNS, rows[start : start + 20000])
            write_payloads(
                conn, [(log_position(partition, i), payload) for i in range(start, min(n, start + 20000))]
            )


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    path: Path = tmp_path_factory.mktemp("search") / "store.db"
    eng = open_engine(f"sqlite:///{path}")
    ensure_projections(eng, [IndexConsumer()])
    fill(eng, "small", 1_000, 0)
    fill(eng, "big", 100_000, 1)
    fill(eng, "other-tenant", 1_000, 2, tenant="u")
    with eng.begin() as conn:
        conn.exec_driver_sql("ANALYZE")
    return eng


def plan(engine: Engine, query: SearchQuery, kind: str | None = None, source: str | None = None) -> str:
    stmt = page_query(query, kind, source, query.after)
    sql = str(stmt.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        return " | ".join(row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))


@pytest.mark.parametrize(
    ("filters", "kind", "source", "index"),
    [
        ({"conversation_id": "big"}, None, None, "index_events_conv"),
        ({}, "action", None, "index_events_kind"),
        ({}, None, "user", "index_events_source"),
        ({"since": "2025-06-15T15:06:40Z"}, None, None, "index_events_time"),
    ],
)
def test_plan_uses_the_matching_index_and_never_sorts(
    engine: Engine, filters: dict, kind: str | None, source: str | None, index: str
) -> None:
    first = search_page(engine, SearchQuery(tenant_id="t", limit=50, **filters), kind, source)
    query = SearchQuery(tenant_id="t", limit=50, cursor=first, **filters)
    text = plan(engine, query, kind, source)
    assert f"USING INDEX {index}" in text or f"USING COVERING INDEX {index}" in text, text
    assert "TEMP B-TREE" not in text, text  # no sort: the index order is the page order
    assert "SCAN index_events" not in text.replace(f"SCAN index_events USING INDEX {index}", ""), text


def search_page(engine: Engine, query: SearchQuery, kind: str | None, source: str | None) -> str | None:
    with engine.connect() as conn:
        q = query.model_copy(
            update={"kinds": (kind,) if kind else (), "sources": (source,) if source else ()}
        )
        return search(conn, q).cursor


def page_time(engine: Engine, conversation_id: str, n: int) -> float:
    """Median seconds for the page of 50 in the middle of a conversation of n events."""
    with engine.connect() as conn:
        half = n // 2 - 1  # the row with seq n/2: the page starts right after it
        cursor = encode_cursor(
            Cursor(from_micros(T0_US + half * 1000), conversation_id, half + 1, f"{conversation_id}-{half}")
        )
        middle = SearchQuery(tenant_id="t", conversation_id=conversation_id, limit=50, cursor=cursor)
        times = []
        for _ in range(30):
            started = time.perf_counter()
            page = search(conn, middle)
            times.append(time.perf_counter() - started)
        assert len(page.rows) == 50 and page.rows[0]["seq"] == n // 2 + 1
    return statistics.median(times)


def test_page_time_is_flat_from_1k_to_100k_events(engine: Engine) -> None:
    small, big = page_time(engine, "small", 1_000), page_time(engine, "big", 100_000)
    print(f"\nsearch page of 50, SQLite: 1k events {small * 1000:.2f} ms, 100k events {big * 1000:.2f} ms")
    assert big / small < 3, (small, big)


def test_other_tenants_rows_never_match(engine: Engine) -> None:
    with engine.connect() as conn:
        page = search(conn, SearchQuery(tenant_id="t", conversation_id="other-tenant"))
        assert page.rows == []
        assert (
            conn.execute(sa.text("SELECT COUNT(*) FROM index_events WHERE tenant_id = 'u'")).scalar() == 1000
        )
