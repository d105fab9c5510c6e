"""Encode/decode: convdb codec vs raw fastavro schemaless (same schema) vs pydantic JSON.

fastavro is called here only to measure it as the ceiling; convdb code calls it in the codec.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from io import BytesIO
from typing import Any

from fastavro import schemaless_reader, schemaless_writer
from pydantic import TypeAdapter

from bench.common import BenchContext, BenchError, Figures, conversation, median, rate
from convdb.schemas import Event, SingleObjectCodec
from convdb.schemas.catalog import shipped_catalog
from convdb.schemas.validation import record_problem

FIGURES = {
    "codec_encode_per_s": ("encode: convdb codec (model -> bytes)", "records/s", ""),
    "codec_decode_per_s": ("decode: convdb codec (bytes -> model)", "records/s", ""),
    "fastavro_encode_per_s": ("encode: raw fastavro schemaless (dict)", "records/s", ""),
    "fastavro_decode_per_s": ("decode: raw fastavro schemaless (dict)", "records/s", ""),
    "json_encode_per_s": ("encode: pydantic model_dump_json", "records/s", ""),
    "json_decode_per_s": ("decode: pydantic validate_json (Event union)", "records/s", ""),
    "validation_ns_per_record": (
        "validation: identifier and text rules of one decoded record (part of decode)",
        "ns/record",
        "",
    ),
}


def run(ctx: BenchContext) -> Figures:
    """Median records/s of each encoder and decoder over `ctx.repeats` runs."""
    count = ctx.pick(20_000, 100_000)
    events = list(conversation("codec", count))
    codec = SingleObjectCodec()
    encoded = [codec.encode(e) for e in events]
    catalog = shipped_catalog()
    schemas = {name: v.parsed for name, v in catalog.latest.items()}
    raw = [(schemas[type(e).__name__], raw_encode(schemas[type(e).__name__], e.__dict__)) for e in events]
    if any(codec.decode(data) != e for data, e in zip(encoded[:100], events, strict=False)):
        raise BenchError("codec round trip is not exact")
    adapter: TypeAdapter[Any] = TypeAdapter(Event)
    texts = [e.model_dump_json() for e in events]
    cases: dict[str, Callable[[], object]] = {
        "codec_encode_per_s": lambda: [codec.encode(e) for e in events],
        "codec_decode_per_s": lambda: [codec.decode(d) for d in encoded],
        "fastavro_encode_per_s": lambda: [raw_encode(schemas[type(e).__name__], e.__dict__) for e in events],
        "fastavro_decode_per_s": lambda: [schemaless_reader(BytesIO(b), s, None) for s, b in raw],
        "json_encode_per_s": lambda: [e.model_dump_json() for e in events],
        "json_decode_per_s": lambda: [adapter.validate_json(t) for t in texts],
    }
    figures = {key: median([_rate(fn, count) for _ in range(ctx.repeats)]) for key, fn in cases.items()}
    figures["validation_ns_per_record"] = 1e9 / median(
        [_rate(lambda: [record_problem(e) for e in events], count) for _ in range(ctx.repeats)]
    )
    return figures


def raw_encode(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    buf = BytesIO()
    schemaless_writer(buf, schema, record)
    return buf.getvalue()


def _rate(fn: Callable[[], object], count: int) -> float:
    start = time.perf_counter()
    fn()
    return rate(count, time.perf_counter() - start)
