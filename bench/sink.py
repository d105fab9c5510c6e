"""Sink: the read-side projectors in one exactly-once runner process, vs consume+decode (the ceiling).

The runner (`convdb.consumers.runner.Runner`, via `bench.sinkrun.measure_sink`) decodes, folds and
writes rows plus consumed offsets in one store transaction per batch. Its ceiling is the work
every sink must do at least: consume each record with the runner's consumer settings AND
decode it, with raw fastavro (schemaless, the writer's schema, into a dict: batches of the
runner's size, garbage collection paced as the runner does). The ceiling is fixed, not the
project's codec, so that a faster codec cannot make the ratio look worse, nor a slower one
better; consume + decode with the project's codec, and a plain consume that does nothing with
the records, are kept as context. All are timed alike, from partition assignment to the last
record, in the same run.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any
from urllib.parse import quote

from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from fastavro import schemaless_reader

from bench.common import BenchContext, BenchError, Figures, conversation, drop_namespace, median, rate
from bench.sinkrun import fill_topic, measure_sink
from convdb.consumers._gc import batch_done, batch_loop
from convdb.consumers.base import Projector
from convdb.consumers.errors import PluginError
from convdb.consumers.plugins import load
from convdb.infra.kafka import make_consumer
from convdb.infra.settings import Settings
from convdb.schemas import EventEnvelope, make_codec
from convdb.schemas.catalog import shipped_catalog
from convdb.schemas.topics import DLQ, EVENTS

WANTED = ("views", "index", "stats")
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"

FIGURES = {
    "sink_events_per_s": ("sink (read side), exactly-once, SQLite: one process", "events/s", ""),
    "sink_ceiling_per_s": (
        "consume + raw fastavro decode, same topic (the sink's ceiling)",
        "events/s",
        "",
    ),
    "sink_ratio": ("sink SQLite / consume+raw decode, paired runs", "ratio", ">= 0.45"),
    "sink_decode_consume_per_s": (
        "consume + decode with convdb's codec (context: the codec's share)",
        "events/s",
        "",
    ),
    "sink_codec_ratio": ("sink SQLite / consume+codec decode (context)", "ratio", ""),
    "sink_pg_events_per_s": ("sink (read side), exactly-once, PostgreSQL: one process", "events/s", ""),
    "sink_pg_ceiling_per_s": (
        "consume + raw fastavro decode, same run as the PostgreSQL sink",
        "events/s",
        "",
    ),
    "sink_pg_ratio": ("sink PostgreSQL / consume+raw decode, paired runs", "ratio", ">= 0.35"),
    "sink_pg_decode_consume_per_s": (
        "consume + codec decode, same run as the PostgreSQL sink",
        "events/s",
        "",
    ),
    "sink_raw_consume_per_s": ("plain consume, records not decoded (context)", "events/s", ""),
    "sink_raw_ratio": ("sink SQLite / plain consume (context)", "ratio", ""),
}


@dataclass
class _Runs:
    sink: list[float] = field(default_factory=list)
    ceiling: list[float] = field(default_factory=list)
    """consume + raw fastavro decode."""
    decode: list[float] = field(default_factory=list)
    """consume + convdb's codec."""
    raw: list[float] = field(default_factory=list)

    def add(self, measured: tuple[float, float, float, float]) -> None:
        raw, ceiling, decode, sink = measured
        self.raw.append(raw)
        self.ceiling.append(ceiling)
        self.decode.append(decode)
        self.sink.append(sink)

    def ratio(self, of: list[float] | None = None) -> float:
        """Median of the per-run ratios: each sink run against the ceiling measured beside it."""
        return median([s / d for s, d in zip(self.sink, of or self.ceiling, strict=True)])


def run(ctx: BenchContext) -> Figures:
    """Median events/s per store backend, the ceilings measured beside each run, and the ratios."""
    count = ctx.pick(50_000, 200_000)
    events = interleaved(count)
    names = present_projectors(ctx)
    sqlite, pg = _Runs(), _Runs()
    pg_url = os.environ.get("CONVDB_BENCH_PG_URL", PG_DEFAULT)
    pg_ok = _pg_reachable(pg_url, ctx)
    for i in range(ctx.repeats):
        sqlite.add(_one(ctx, events, names, lambda s: f"sqlite:///{s.data_dir / 'store.db'}"))
        note = (
            f"sink run {i + 1}: plain consume {sqlite.raw[-1]:,.0f}/s, consume+raw decode "
            f"{sqlite.ceiling[-1]:,.0f}/s, consume+codec {sqlite.decode[-1]:,.0f}/s, "
            f"SQLite {sqlite.sink[-1]:,.0f}/s"
        )
        if pg_ok:
            with pg_schema(pg_url) as url:
                pg.add(_one(ctx, events, names, lambda _s, url=url: url))
            note += (
                f"; consume+raw decode {pg.ceiling[-1]:,.0f}/s, consume+codec {pg.decode[-1]:,.0f}/s, "
                f"PostgreSQL {pg.sink[-1]:,.0f}/s"
            )
        ctx.notes.append(note)
    ctx.notes.append(
        f"sink projectors: {' + '.join(names)}; {count:,} events over 100 conversations; every rate "
        "is clocked from partition assignment to the last record (the sink: to the last commit)"
    )
    figures = {
        "sink_events_per_s": median(sqlite.sink),
        "sink_ceiling_per_s": median(sqlite.ceiling),
        "sink_ratio": sqlite.ratio(),
        "sink_decode_consume_per_s": median(sqlite.decode),
        "sink_codec_ratio": sqlite.ratio(sqlite.decode),
        "sink_raw_consume_per_s": median(sqlite.raw),
        "sink_raw_ratio": sqlite.ratio(sqlite.raw),
    }
    if pg.sink:
        figures["sink_pg_events_per_s"] = median(pg.sink)
        figures["sink_pg_ceiling_per_s"] = median(pg.ceiling)
        figures["sink_pg_ratio"] = pg.ratio()
        figures["sink_pg_decode_consume_per_s"] = median(pg.decode)
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
) -> tuple[float, float, float, float]:
    """(plain consume, consume+raw decode, consume+codec decode, sink) events/s over one freshly
    filled topic."""
    settings = ctx.fresh("sink", (EVENTS, DLQ))
    settings = settings.model_copy(update={"store_url": store(settings)})  # type: ignore[operator]
    try:
        fill_topic(settings, events)
        raw = consume_rate(settings, len(events))
        ceiling = consume_rate(settings, len(events), raw_decoder())
        codec = make_codec(settings.schema_registry_url)
        expect = EVENTS.value_types
        decoded = consume_rate(settings, len(events), lambda data: codec.decode(data, expect=expect))
        projectors: list[Projector] = [load(n, settings) for n in names]
        result = measure_sink(settings, projectors, len(events), timeout=600)
        return raw, ceiling, decoded, result.per_second
    finally:
        drop_namespace(settings)


def raw_decoder() -> Callable[[bytes], Any]:
    """Raw fastavro: a single-object record to a dict with its writer's schema (no model, no checks)."""
    writers = {v.fingerprint: v.parsed for v in shipped_catalog().versions}

    def decode(data: bytes) -> Any:
        buf = BytesIO(data)
        buf.seek(10)
        return schemaless_reader(buf, writers[data[2:10]], None)

    return decode


def consume_rate(
    settings: Settings,
    expected: int,
    decode: Callable[[bytes], Any] | None = None,
    timeout: float = 120.0,
    batch: int = 5000,
) -> float:
    """Events/s reading the events topic from assignment to the last record; with `decode`, decoding each.

    The consumer has the runner's settings (`make_consumer`), batch size and garbage-collection
    pacing, so the only difference from the sink is what it does beyond consuming and decoding.
    """
    topic = EVENTS.name(settings.namespace)
    consumer = make_consumer(settings, f"{settings.namespace}.ceiling-{uuid.uuid4().hex[:8]}")
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        seen, deadline = 0, time.monotonic() + timeout
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        with batch_loop():  # the runner's garbage-collection pacing
            while seen < expected:
                if time.monotonic() > deadline:
                    raise BenchError(f"consumer saw {seen} of {expected} events in {timeout}s")
                messages = [m for m in consumer.consume(batch, 0.05) if m.error() is None]
                if decode is not None:
                    decoded = [decode(m.value()) for m in messages]
                    if len(decoded) != len(messages):
                        raise BenchError("decode lost records")
                    del decoded
                seen += len(messages)
                del messages
                batch_done()
        return rate(seen, time.perf_counter() - started)
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
