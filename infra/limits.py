"""The largest record convdb writes, as every writer that checks it computes it."""

from __future__ import annotations

from infra.settings import Settings

HEADROOM = 1024
"""Bytes kept for what a record carries besides its value and key: trace headers, Kafka's framing."""


def record_limit(settings: Settings) -> int:
    """Largest record (value, key and headers) a runner writes: `runtime.max_record_bytes`, or
    librdkafka's `message.max.bytes` when that is set lower (`kafka.extra`)."""
    limit = settings.runtime.max_record_bytes
    configured = settings.kafka.extra.get("message.max.bytes")
    if isinstance(configured, int | str) and str(configured).isdigit():
        limit = min(limit, int(configured))
    return limit
