"""Publish: convdb `EventPublisher` vs raw confluent-kafka producing the same bytes (the ceiling).

Both use `convdb.infra.kafka.producer_config` (idempotent, acks=all), one process, 1 KB events keyed
by conversation. convdb's time includes what it really does per event: seq check, Avro encode,
a delivery record; the raw producer gets the already-encoded bytes and only counts errors.

So the ratio has a bound below 1 that no publisher encoding in its producing thread can pass:
raw fastavro's encode of the same events is timed in the same run (the models' fields, the
writer's schema, no checks), and `publish_encode_bound_ratio` is raw's time per event over raw's
plus that encode's: what convdb would reach if its encode cost only fastavro's and everything
else nothing.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer

from bench.codec import raw_encode
from bench.common import BenchContext, BenchError, Figures, drop_namespace, many_conversations, median, rate
from convdb.infra.kafka import producer_config
from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import EventEnvelope, SingleObjectCodec
from convdb.schemas.catalog import shipped_catalog
from convdb.schemas.topics import EVENTS

FIGURES = {
    "publish_events_per_s": ("publish 1 KB, idempotent: convdb EventPublisher", "events/s", ""),
    "publish_raw_events_per_s": ("publish 1 KB, idempotent: raw confluent-kafka (ceiling)", "events/s", ""),
    "publish_ratio": ("publish: convdb / raw, paired runs", "ratio", ">= 0.8"),
    "publish_raw_plain_events_per_s": ("publish 1 KB: raw, not idempotent (context)", "events/s", ""),
    "publish_fastavro_encode_per_s": ("raw fastavro encode of the same events (context)", "records/s", ""),
    "publish_encode_bound_ratio": (
        "bound of the ratio with a fastavro encode in the producing thread: raw / (raw + encode)",
        "ratio",
        "",
    ),
}


def run(ctx: BenchContext) -> Figures:
    """Median events/s of each variant over `ctx.repeats` interleaved runs, and the paired ratio."""
    count = ctx.pick(10_000, 100_000)
    events = many_conversations(count)
    codec = SingleObjectCodec()
    payloads = [(e.conversation_id, codec.encode(e)) for e in events]
    ours, raw, plain, ratios, encodes, bounds = [], [], [], [], [], []
    _convdb(ctx, events[:1000], codec)  # warm-up: imports, first connections
    for _ in range(ctx.repeats):
        r = _raw(ctx, payloads, idempotent=True)
        c = _convdb(ctx, events, codec)
        e = _fastavro_encode_rate(events)
        raw.append(r)
        ours.append(c)
        ratios.append(c / r)
        encodes.append(e)
        bounds.append((1 / r) / (1 / r + 1 / e))
        plain.append(_raw(ctx, payloads, idempotent=False))
    return {
        "publish_events_per_s": median(ours),
        "publish_raw_events_per_s": median(raw),
        "publish_ratio": median(ratios),
        "publish_raw_plain_events_per_s": median(plain),
        "publish_fastavro_encode_per_s": median(encodes),
        "publish_encode_bound_ratio": median(bounds),
    }


def _fastavro_encode_rate(events: list[EventEnvelope]) -> float:
    """Records/s of raw fastavro's schemaless encode of the events (each type's newest schema)."""
    schemas = {name: v.parsed for name, v in shipped_catalog().latest.items()}
    start = time.perf_counter()
    for event in events:
        raw_encode(schemas[type(event).__name__], event.__dict__)
    return rate(len(events), time.perf_counter() - start)


def _convdb(ctx: BenchContext, events: list[EventEnvelope], codec: SingleObjectCodec) -> float:
    settings = ctx.fresh("pub", (EVENTS,))
    try:
        publisher = EventPublisher(settings, codec)
        start = time.perf_counter()
        for event in events:
            publisher.publish(event)
        publisher.flush()
        return rate(len(events), time.perf_counter() - start)
    finally:
        drop_namespace(settings)


def _raw(ctx: BenchContext, payloads: list[tuple[str, bytes]], *, idempotent: bool) -> float:
    settings = ctx.fresh("raw", (EVENTS,))
    try:
        return _produce_raw(settings, payloads, idempotent)
    finally:
        drop_namespace(settings)


def _produce_raw(settings: Settings, payloads: list[tuple[str, bytes]], idempotent: bool) -> float:
    conf: dict[str, Any] = producer_config(settings)
    if not idempotent:
        conf.update({"enable.idempotence": False, "acks": "1"})
    producer = Producer(conf)
    topic = EVENTS.name(settings.namespace)
    errors: list[Any] = []

    def count_errors(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    start = time.perf_counter()
    for key, value in payloads:
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=count_errors)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) or errors:
        raise BenchError(f"raw producer lost messages: {errors[:3]}")
    return rate(len(payloads), time.perf_counter() - start)
