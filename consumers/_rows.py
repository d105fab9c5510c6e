"""Helpers the projectors share: time columns and event payload JSON."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter

from schemas.events import Event

_EVENT = TypeAdapter(Event)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(value: datetime) -> int:
    """Microseconds since the epoch: the integer form every time column uses (exact, portable)."""
    delta = value - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    """The UTC datetime of a `micros` value."""
    return datetime.fromtimestamp(value // 1_000_000, UTC).replace(microsecond=value % 1_000_000)


def event_from_json(text: str | bytes) -> Any:
    """The event model of a payload column."""
    return _EVENT.validate_json(text)
