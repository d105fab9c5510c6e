"""Helpers the projectors share: time columns, event payload JSON, grouping, checked folds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import TypeAdapter

from consumers.base import ConsumedRecord
from projections.errors import ProjectionError
from schemas.events import Event, EventEnvelope

S = TypeVar("S")

_EVENT = TypeAdapter(Event)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(value: datetime) -> int:
    """Microseconds since the epoch: the integer form every time column uses (exact, portable)."""
    delta = value - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    """The UTC datetime of a `micros` value."""
    return datetime.fromtimestamp(value // 1_000_000, UTC).replace(microsecond=value % 1_000_000)


_JSON_MEMO: dict[str, tuple[EventEnvelope, str]] = {}


def event_json(event: EventEnvelope) -> str:
    """An event as the JSON text stored in payload columns (memoized: several projectors store it)."""
    memo = _JSON_MEMO.get(event.id)
    if memo is not None and memo[0] is event:
        return memo[1]
    if len(_JSON_MEMO) > 50000:
        _JSON_MEMO.clear()
    text = event.model_dump_json()
    _JSON_MEMO[event.id] = (event, text)
    return text


def event_from_json(text: str | bytes) -> Any:
    """The event model of a payload column."""
    return _EVENT.validate_json(text)


def events_only(records: Sequence[ConsumedRecord]) -> list[ConsumedRecord]:
    """Records whose value is a conversation event (the events topic)."""
    return [r for r in records if isinstance(r.value, EventEnvelope)]


def by_conversation(records: Sequence[ConsumedRecord]) -> dict[str, list[ConsumedRecord]]:
    """Event records grouped by conversation, in log order within each."""
    groups: dict[str, list[ConsumedRecord]] = {}
    for record in records:
        groups.setdefault(record.value.conversation_id, []).append(record)  # type: ignore[attr-defined]
    return groups


def fold_checked(
    fold: Callable[[S, Any], S],
    state: S,
    records: Sequence[ConsumedRecord],
    rejected: list[tuple[ConsumedRecord, BaseException]],
) -> tuple[S, list[ConsumedRecord]]:
    """Fold records one by one; a record the projection refuses is added to `rejected` and skipped.

    Returns the final state and the records that were folded.
    """
    folded = []
    for record in records:
        try:
            state = fold(state, record.value)
        except ProjectionError as exc:
            rejected.append((record, exc))
            continue
        folded.append(record)
    return state, folded
