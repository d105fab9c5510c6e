"""Sink: the read-side projectors in one exactly-once runner process, vs raw consume (the ceiling).

The runner (`consumers.runner.Runner`, via `consumers.bench.measure_sink`) decodes, folds and
writes rows plus consumed offsets in one store transaction per batch. The ceiling is a raw
confluent-kafka consumer reading the same topic and doing nothing with the records. Both are
timed from their first record to the last.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench.common import BenchContext, BenchError, Figures, conversation, drop_namespace, median, rate
from consumers.base import Projector
from consumers.bench import fill_topic, measure_sink
from consumers.errors import PluginError
from consumers.plugins import load
from infra.kafka import common_config
from infra.settings import Settings
from schemas import EventEnvelope
from schemas.topics import DLQ, EVENTS

WANTED = ("views", "index", "stats")
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"

FIGURES = {
    "sink_events_per_s": ("sink (read side), exactly-once, SQLite: one process", "events/s", ">= 30k"),
    "sink_pg_events_per_s": ("sink (read side), exactly-once, PostgreSQL: one process", "events/s", ">= 30k"),
    "sink_raw_consume_per_s": ("raw confluent-kafka consume, same topic (ceiling)", "events/s", ""),
    "sink_ratio": ("sink SQLite / raw consume", "ratio", ""),
    "sink_pg_ratio": ("sink PostgreSQL / raw consume", "ratio", ""),
}


def run(ctx: BenchContext) -> Figures:
    """Median events/s per store backend, the raw ceiling, and the ratios."""
    count = ctx.pick(20_000, 100_000)
    events = interleaved(count)
    names = present_projectors(ctx)
    sqlite, pg, raw = [], [], []
    pg_url = os.environ.get("CONVDB_BENCH_PG_URL", PG_DEFAULT)
    pg_ok = _pg_reachable(pg_url, ctx)
    for i in range(ctx.repeats):
        raw_rate, sink_rate = _one(ctx, events, names, lambda s: f"sqlite:///{s.data_dir / 'store.db'}")
        raw.append(raw_rate)
        sqlite.append(sink_rate)
        if pg_ok:
            with pg_schema(pg_url) as url:
                pg.append(_one(ctx, events, names, lambda _s, url=url: url)[1])
        ctx.notes.append(f"sink run {i + 1}: raw {raw_rate:,.0f}/s, SQLite {sink_rate:,.0f}/s")
    ctx.notes.append(f"sink projectors: {' + '.join(names)}; {count:,} events over 100 conversations")
    figures = {
        "sink_events_per_s": median(sqlite),
        "sink_raw_consume_per_s": median(raw),
        "sink_ratio": median(sqlite) / median(raw),
    }
    if pg:
        figures["sink_pg_events_per_s"] = median(pg)
        figures["sink_pg_ratio"] = median(pg) / median(raw)
    return figures


def present_projectors(ctx: BenchContext) -> list[str]:
    """The wanted projectors that are installed; a missing one is noted, never faked."""
    found = []
    for name in WANTED:
        try:
            load(name, ctx.settings)
            found.append(name)
        except PluginError as exc:
            ctx.notes.append(f"sink: projector {name!r} not measured (not in the tree yet: {exc})")
    if not found:
        raise BenchError("no read-side projector is installed")
    return found


def interleaved(count: int, conversations: int = 100) -> list[EventEnvelope]:
    """Agent-shaped conversations interleaved round-robin, as concurrent runners would write them."""
    per = count // conversations
    streams = [list(conversation(f"sink-{c:03d}", per)) for c in range(conversations)]
    return [stream[i] for i in range(per) for stream in streams]


def _one(
    ctx: BenchContext, events: list[EventEnvelope], names: list[str], store: object
) -> tuple[float, float]:
    settings = ctx.fresh("sink", (EVENTS, DLQ))
    settings = settings.model_copy(update={"store_url": store(settings)})  # type: ignore[operator]
    try:
        fill_topic(settings, events)
        raw = raw_consume(settings, len(events))
        projectors: list[Projector] = [load(n, settings) for n in names]
        result = measure_sink(settings, projectors, len(events), timeout=600)
        return raw, result.per_second
    finally:
        drop_namespace(settings)


def raw_consume(settings: Settings, expected: int, timeout: float = 120.0) -> float:
    """Events/s of a raw consumer reading the events topic, first record to last."""
    topic = EVENTS.name(settings.namespace)
    consumer = Consumer(
        {**common_config(settings), "group.id": f"raw-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
    )
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        seen, first, deadline = 0, 0.0, time.monotonic() + timeout
        while seen < expected:
            if time.monotonic() > deadline:
                raise BenchError(f"raw consumer saw {seen} of {expected} events in {timeout}s")
            batch = consumer.consume(5000, 0.5)
            if batch and not first:
                first = time.perf_counter()
            seen += sum(1 for m in batch if m.error() is None)
        return rate(seen, time.perf_counter() - first)
    finally:
        consumer.close()


def _pg_reachable(url: str, ctx: BenchContext) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3):
            return True
    except psycopg.Error as exc:
        ctx.notes.append(f"sink: PostgreSQL at {url} not reachable, no PostgreSQL figure ({exc})")
        return False


@contextmanager
def pg_schema(url: str) -> Iterator[str]:
    """A fresh schema on the PostgreSQL server; yields a store URL whose search_path is it."""
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
