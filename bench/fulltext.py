"""Full-text search (`GET /events?q=`): page latency p50/p99 over a tenant's N events, SQLite and PostgreSQL.

The store is filled by the index projector itself (`IndexConsumer.apply`, no Kafka in between: the
search is what is timed). The events are messages, actions and observations of 1,000 conversations
whose words are drawn from a Zipf-like vocabulary of 20,000 words, so queries range from a rare
word (a few hits) through a middling one to a common one (hits in a large part of the events), and
two-word queries; each search asks for a first page of 50 and then the next page by its cursor,
over the whole tenant (the console's search box) and within one conversation. Another tenant's
events are in the same tables (they must cost nothing and never be found).
PostgreSQL: `CONVDB_BENCH_PG_URL` (default the local test server); skipped with a note without it.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from bench.common import BASE_TIME, BenchContext, BenchError, Figures
from bench.sink import PG_DEFAULT, _pg_reachable, pg_schema
from convdb.consumers.base import ConsumedRecord
from convdb.consumers.index import IndexConsumer
from convdb.consumers.index.search import search
from convdb.consumers.store import ensure_projections, open_engine
from convdb.projections.index import SearchQuery
from convdb.schemas import ActionEvent, EventEnvelope, MessageEvent, ObservationEvent

VOCABULARY = 20_000
CONVERSATIONS = 1_000
PAGE = 50
SEARCHES = 100
"""Searches per query shape (half of them first pages, half the next page when there is one);
p50 and p99 are over all of them."""

FIGURES = {
    "fulltext_p50_ms": ("full-text search page of 50 (SQLite FTS5)", "ms", "<= 50"),
    "fulltext_p99_ms": ("full-text search page of 50, p99 (SQLite FTS5)", "ms", ""),
    "fulltext_pg_p50_ms": ("full-text search page of 50 (PostgreSQL GIN)", "ms", "<= 50"),
    "fulltext_pg_p99_ms": ("full-text search page of 50, p99 (PostgreSQL GIN)", "ms", ""),
    "fulltext_events": ("full-text search: events in the store", "events", ""),
}


def _word(rank: int) -> str:
    return f"w{rank:05d}"


def events(count: int, seed: int = 26) -> Iterator[EventEnvelope]:
    """`count` events of tenant `bench` over `CONVERSATIONS` conversations, a few of tenant `other`."""
    rng = random.Random(seed)
    ranks = [int(VOCABULARY ** rng.random()) for _ in range(200_000)]  # log-uniform ranks: Zipf-like

    def text(n: int) -> str:
        return " ".join(_word(rng.choice(ranks)) for _ in range(n))

    seqs = [0] * CONVERSATIONS
    parents: list[str | None] = [None] * CONVERSATIONS
    for i in range(count):
        c = i % CONVERSATIONS
        seqs[c] += 1
        seq = seqs[c]
        common: dict[str, Any] = {
            "id": str(uuid.UUID(int=rng.getrandbits(128))),
            "conversation_id": f"conv-{c:04d}",
            "tenant_id": "other" if c % 100 == 99 else "bench",
            "seq": seq,
            "timestamp": BASE_TIME + timedelta(milliseconds=i),
            "parent_id": parents[c],
        }
        event: EventEnvelope
        if seq % 3 == 1:
            event = MessageEvent(**common, source="user", role="user", content=text(12))
        elif seq % 3 == 2:
            event = ActionEvent(
                **common, source="agent", tool_name="execute_bash", tool_call_id=f"call_{seq}",
                arguments=f'{{"command": "grep {text(2)}"}}', thought=text(8), llm_response_id=f"r{seq}",
                operation_id=f"{common['conversation_id']}/{common['id']}", intent_hash="0" * 64,
                effect_class="read_only",
            )  # fmt: skip
        else:
            event = ObservationEvent(
                **common, source="environment", action_id=str(parents[c]), tool_name="execute_bash",
                tool_call_id=f"call_{seq - 1}", content=text(40),
            )  # fmt: skip
        parents[c] = event.id
        yield event


def fill(url: str, count: int) -> None:
    """The index of `count` events, written by the index projector in batches of 5,000."""
    engine = open_engine(url)
    projector = IndexConsumer()
    ensure_projections(engine, [projector])
    batch: list[ConsumedRecord] = []
    for offset, event in enumerate(events(count)):
        batch.append(ConsumedRecord("events", 0, offset, 0, event.conversation_id, event))
        if len(batch) == 5000:
            with engine.begin() as conn:
                projector.apply(conn, batch)
            batch = []
    if batch:
        with engine.begin() as conn:
            projector.apply(conn, batch)
    with engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE")
    engine.dispose()


QUERIES = (
    {"q": _word(15_000)},  # rare
    {"q": _word(300)},  # middling
    {"q": _word(3)},  # common
    {"q": f"{_word(3)} {_word(40)}"},  # two words
    {"q": _word(300), "conversation_id": "conv-0007"},  # within one conversation
)


SHAPES = ("rare word", "middling word", "common word", "two words", "one conversation")
"""Names of `QUERIES`, in order (for the per-shape medians in the notes)."""


def timings(url: str, by_shape: dict[str, list[float]] | None = None) -> list[float]:
    """ms of each search: every query shape, a first page then the next, `SEARCHES` times over
    (each also under its shape's name in `by_shape`)."""
    engine = open_engine(url, writer=False)
    times: list[float] = []
    by_shape = {} if by_shape is None else by_shape
    with engine.connect() as conn:
        for _ in range(SEARCHES // 2):
            for name, shape in zip(SHAPES, QUERIES, strict=True):
                cursor = None
                for _page in range(2):
                    start = time.perf_counter()
                    page = search(conn, SearchQuery(tenant_id="bench", limit=PAGE, cursor=cursor, **shape))
                    times.append((time.perf_counter() - start) * 1000)
                    by_shape.setdefault(name, []).append(times[-1])
                    if any(row["conversation_id"].endswith("99") for row in page.rows):
                        raise BenchError("full-text search returned another tenant's event")
                    cursor = page.cursor
                    if cursor is None:
                        break
        common = search(conn, SearchQuery(tenant_id="bench", limit=PAGE, q=_word(3)))
        if len(common.rows) != PAGE:
            raise BenchError(f"the common word found {len(common.rows)} events on a first page")
    engine.dispose()
    return times


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run(ctx: BenchContext) -> Figures:
    """p50/p99 at 100k events (small) or 1M (large), on SQLite and, when it answers, PostgreSQL."""
    count = ctx.pick(100_000, 1_000_000)
    figures: Figures = {"fulltext_events": count}
    started = time.perf_counter()
    url = f"sqlite:///{ctx.workdir / 'fulltext.db'}"
    fill(url, count)
    filled = time.perf_counter() - started
    shapes: dict[str, list[float]] = {}
    times = timings(url, shapes)
    figures["fulltext_p50_ms"] = percentile(times, 0.5)
    figures["fulltext_p99_ms"] = percentile(times, 0.99)
    note = f"full-text: {count:,} events, {len(times)} searches per store; SQLite filled in {filled:.0f} s"
    note += "; SQLite median by shape: " + _medians(shapes)
    pg_url = os.environ.get("CONVDB_BENCH_PG_URL", PG_DEFAULT)
    if _pg_reachable(pg_url, ctx):
        with pg_schema(pg_url) as store:
            started = time.perf_counter()
            fill(store, count)
            note += f", PostgreSQL in {time.perf_counter() - started:.0f} s"
            shapes = {}
            times = timings(store, shapes)
        note += "; PostgreSQL median by shape: " + _medians(shapes)
        figures["fulltext_pg_p50_ms"] = percentile(times, 0.5)
        figures["fulltext_pg_p99_ms"] = percentile(times, 0.99)
    ctx.notes.append(note)
    return figures


def _medians(shapes: dict[str, list[float]]) -> str:
    return ", ".join(f"{name} {percentile(values, 0.5):.1f} ms" for name, values in shapes.items())
