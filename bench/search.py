"""Search: a page of 50 filtered events from a conversation of N events, convdb vs the file log.

convdb: the index consumer's rows in the read-side store (SQLite, the embedded default),
searched with keyset pagination (`convdb.consumers.index.search`). The rows are written by the index
projector itself (`IndexConsumer.apply`), without Kafka in between: the search is what is timed.
Baseline: `bench.filelog`, the same events as one JSON file each. Both must return the same page.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.common import BenchContext, BenchError, Figures, conversation, median
from bench.filelog import search_log, write_log
from convdb.consumers.base import ConsumedRecord
from convdb.consumers.index import IndexConsumer
from convdb.consumers.index.search import search
from convdb.consumers.store import ensure_projections, open_engine
from convdb.projections.index import SearchQuery
from convdb.schemas import EventEnvelope

KINDS = ("observation",)
PAGE = 50
SEARCHES = 20
"""Searches per convdb measurement (each a different page); the figure is the median of them."""

FIGURES = {
    "search_ms_1k": ("search page of 50, 1k-event conversation: convdb", "ms", "<= 10"),
    "search_ms_10k": ("search page of 50, 10k-event conversation: convdb", "ms", "<= 10"),
    "search_ms_100k": ("search page of 50, 100k-event conversation: convdb", "ms", "<= 10, flat"),
    "baseline_search_ms_1k": ("search page of 50, 1k events: file-per-event log", "ms", ""),
    "baseline_search_ms_10k": ("search page of 50, 10k events: file-per-event log", "ms", ""),
    "baseline_search_ms_100k": ("search page of 50, 100k events: file-per-event log", "ms", ""),
}


def run(ctx: BenchContext) -> Figures:
    """convdb and the file log at 1k, 10k and 100k events (100k costs the baseline seconds per search)."""
    figures: Figures = {}
    for size, label in ((1_000, "1k"), (10_000, "10k"), (100_000, "100k")):
        events = list(conversation(f"search-{label}", size))
        engine_url = f"sqlite:///{ctx.workdir / f'search-{label}.db'}"
        filters = {"tenant_id": "bench", "conversation_id": f"search-{label}", "kinds": KINDS, "limit": PAGE}
        pages = convdb_pages(engine_url, events, filters)
        figures[f"search_ms_{label}"] = median(
            [convdb_search_ms(engine_url, filters, pages) for _ in range(ctx.repeats)]
        )
        root = write_log(ctx.workdir / f"filelog-{label}", events)
        figures[f"baseline_search_ms_{label}"] = median(
            [baseline_search_ms(root, pages[0][1]) for _ in range(ctx.repeats)]
        )
    return figures


def fill_index(engine_url: str, events: list[EventEnvelope]) -> None:
    """Write the index rows of `events` into a store, as the index consumer does."""
    engine = open_engine(engine_url)
    projector = IndexConsumer()
    records = [
        ConsumedRecord("events", 0, offset, 0, e.conversation_id, e) for offset, e in enumerate(events)
    ]
    ensure_projections(engine, [projector])  # its tables and the shared payload table
    with engine.begin() as conn:
        for start in range(0, len(records), 5000):
            projector.apply(conn, records[start : start + 5000])
    engine.dispose()


Pages = list[tuple[str | None, list[str]]]
"""(keyset cursor, event ids of the page) for consecutive pages."""
Filters = dict[str, Any]
"""The `SearchQuery` fields of one search, without the cursor."""


def convdb_pages(engine_url: str, events: list[EventEnvelope], filters: Filters) -> Pages:
    """Fill the store, then walk the first `SEARCHES` pages: (cursor, event ids) of each."""
    fill_index(engine_url, events)
    engine = open_engine(engine_url, writer=False)
    pages: Pages = []
    cursor: str | None = None
    with engine.connect() as conn:
        for _ in range(SEARCHES):
            page = search(conn, SearchQuery(**filters, cursor=cursor))
            pages.append((cursor, [r["event_id"] for r in page.rows]))
            if page.cursor is None:
                break
            cursor = page.cursor
    engine.dispose()
    if len(pages[0][1]) != min(PAGE, sum(1 for e in events if e.kind in KINDS)):
        raise BenchError(f"convdb search returned {len(pages[0][1])} rows on the first page")
    return pages


def convdb_search_ms(engine_url: str, filters: Filters, pages: Pages) -> float:
    """Median ms of one page search over several pages (a connection is reused, as the API does)."""
    engine = open_engine(engine_url, writer=False)
    times = []
    with engine.connect() as conn:
        for cursor, ids in pages:
            start = time.perf_counter()
            page = search(conn, SearchQuery(**filters, cursor=cursor))
            times.append((time.perf_counter() - start) * 1000)
            if [r["event_id"] for r in page.rows] != ids:
                raise BenchError("convdb search is not repeatable")
    engine.dispose()
    return median(times)


def baseline_search_ms(root: Path, expected_ids: list[str]) -> float:
    """ms of one first-page search of the file log; it must find the same events as convdb."""
    start = time.perf_counter()
    rows = search_log(root, KINDS, PAGE)
    elapsed = (time.perf_counter() - start) * 1000
    if [r["id"] for r in rows] != expected_ids:
        raise BenchError("the file log and convdb disagree on the first page")
    return elapsed
