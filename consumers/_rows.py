"""Helpers the projectors share: time columns, event payload JSON, grouping, checked folds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import TypeAdapter

from consumers.base import ConsumedRecord
from projections.errors import ProjectionError
from schemas.events import EVENT_TYPES, Event, EventEnvelope

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
    # What `model_dump_json()` returns, without its keyword plumbing (~0.7 µs an event).
    text = event.__pydantic_serializer__.to_json(event).decode()
    _JSON_MEMO[event.id] = (event, text)
    return text


def event_from_json(text: str | bytes) -> Any:
    """The event model of a payload column."""
    return _EVENT.validate_json(text)


_EVENT_CLASSES = frozenset(EVENT_TYPES)


def events_only(records: Sequence[ConsumedRecord]) -> Sequence[ConsumedRecord]:
    """Records whose value is a conversation event (the events topic); `records` itself if all are."""
    # An exact-class set lookup first: isinstance on pydantic models goes through ABCMeta (slow).
    kept = [r for r in records if r.value.__class__ in _EVENT_CLASSES or isinstance(r.value, EventEnvelope)]
    return records if len(kept) == len(records) else kept


_GROUPS_MEMO: tuple[Sequence[ConsumedRecord], int, dict[str, list[ConsumedRecord]]] | None = None


def by_conversation(records: Sequence[ConsumedRecord]) -> dict[str, list[ConsumedRecord]]:
    """Event records grouped by conversation, in log order within each (callers must not mutate it).

    The last result is memoized on the identity of `records`: the runner hands one batch list to
    every projector, and views, stats and titles all group it.
    """
    global _GROUPS_MEMO
    memo = _GROUPS_MEMO  # one read: another runner thread may replace it
    if memo is not None and memo[0] is records and memo[1] == len(records):
        return memo[2]
    groups: dict[str, list[ConsumedRecord]] = {}
    for record in records:
        conv = record.value.conversation_id  # type: ignore[attr-defined]
        group = groups.get(conv)
        if group is None:
            groups[conv] = [record]
        else:
            group.append(record)
    _GROUPS_MEMO = (records, len(records), groups)
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


def fold_batch(
    fold_all: Callable[[S, Any], S],
    fold: Callable[[S, Any], S],
    state: S,
    records: Sequence[ConsumedRecord],
    rejected: list[tuple[ConsumedRecord, BaseException]],
) -> tuple[S, Sequence[ConsumedRecord]]:
    """`fold_checked`, but through the projection's batched `fold_all` while no record is refused.

    `fold_all` must equal folding one by one (each projection's tests prove it); on the first
    refusal the batch is folded again record by record, so the outcome is `fold_checked`'s.
    """
    try:
        return fold_all(state, [r.value for r in records]), records
    except ProjectionError:
        return fold_checked(fold, state, records, rejected)
