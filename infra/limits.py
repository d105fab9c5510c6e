"""The largest record convdb writes, as every writer that checks it computes it."""

from __future__ import annotations

from convdb.infra.settings import Settings

HEADROOM = 1024
"""Bytes kept for what a record carries besides its value and key: trace headers, Kafka's framing."""


def record_limit(settings: Settings) -> int:
    """Largest record (value, key and headers) a runner writes (`runtime.max_record_bytes`).

    One that the broker or librdkafka refuses all the same (a lower `message.max.bytes`) is
    dead-lettered when the commit fails (`convdb.producers.fleet.intake`), just later.
    """
    return settings.runtime.max_record_bytes
