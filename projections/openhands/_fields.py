"""Reading OpenHands JSON with errors that name the record and field; ids and timestamps.

OpenHands writes `timestamp` as naive local time (`datetime.now().isoformat()`); convdb reads
a naive timestamp as UTC (the zone of the agent-server is not in the record) and gives the
original text back on export whenever its rebuilt form differs.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime
from typing import Any

from convdb.projections.errors import ForeignRecordError
from convdb.schemas.validation import id_problem, json_problem, shown

_NAMESPACE = uuid.UUID("7f1d0c4e-6a55-4d2b-9a51-0e3f6c1b8a20")
"""uuid5 namespace of the ids convdb derives from OpenHands records (stable across runs)."""


def require(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """`obj[key]`, which must be present and of `kind`."""
    if key not in obj or obj[key] is None:
        raise ForeignRecordError(f"{where}: `{key}` is missing")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _types(kind)):
        raise ForeignRecordError(f"{where}: `{key}` must be {_name(kind)}, got {type(value).__name__}")
    return value


def optional(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """`obj[key]` when present and not null (then it must be of `kind`), else None."""
    if obj.get(key) is None:
        return None
    return require(obj, key, kind, where)


def _types(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _name(kind: type | tuple[type, ...]) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer"}
    return " or ".join(names.get(k, k.__name__) for k in _types(kind))


def check_json(value: Any, where: str) -> None:
    """JSON convdb can walk and store: bounded nesting, 64-bit integers, finite numbers."""
    problem = json_problem(value)
    if problem is not None:
        raise ForeignRecordError(f"{where}: the JSON {problem}")


def event_id(value: Any, where: str, what: str = "id") -> str:
    """A valid event id (the identifier rule of `convdb.schemas.validation`)."""
    problem = id_problem(value)
    if problem is not None:
        raise ForeignRecordError(f"{where}: `{what}` {shown(value)} {problem}")
    return value  # type: ignore[no-any-return]


def parse_timestamp(value: Any, where: str) -> datetime:
    """An OpenHands timestamp as an aware UTC datetime (naive text is read as UTC)."""
    if not isinstance(value, str):
        raise ForeignRecordError(f"{where}: `timestamp` must be ISO 8601 text")
    try:
        moment = datetime.fromisoformat(value)
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise ForeignRecordError(f"{where}: `timestamp` {value[:40]!r} is not ISO 8601: {exc}") from exc


def format_timestamp(moment: datetime) -> str:
    """The text OpenHands would have written for `moment` (naive, as `datetime.isoformat`)."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat()


def texts(items: Any, where: str, key: str) -> str:
    """The text parts of an OpenHands content list, joined by newlines (images are skipped)."""
    if not isinstance(items, list):
        raise ForeignRecordError(f"{where}: `{key}` must be an array of content items")
    parts = []
    for item in items:
        if not isinstance(item, dict):
            raise ForeignRecordError(f"{where}: `{key}` items must be objects")
        if item.get("type") == "text":
            parts.append(require(item, "text", str, f"{where}: `{key}` item"))
    return "\n".join(parts)


def text_items(text: str) -> list[dict[str, Any]]:
    """The OpenHands content list holding one text (empty for an empty text)."""
    return [{"cache_prompt": False, "type": "text", "text": text}] if text else []


def canonical_json(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces (what `ActionEvent.arguments` holds)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def intent_hash(tool_name: str, arguments: str) -> str:
    """sha256 of tool_name + canonical arguments (DESIGN §1)."""
    return hashlib.sha256((tool_name + arguments).encode()).hexdigest()


def derived_id(conversation_id: str, *parts: str) -> str:
    """A deterministic id for an event convdb derives (a replay or a retry derives the same id)."""
    return str(uuid.uuid5(_NAMESPACE, "/".join((conversation_id, *parts))))


def digest(value: Any) -> str:
    """A short, stable digest of a JSON value (ids of records that carry none)."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:32]


def conversation_key(value: Any, where: str) -> str:
    """An OpenHands conversation id (hex or dashed UUID) as convdb's conversation id (dashed)."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError as exc:
        raise ForeignRecordError(f"{where}: {str(value)[:80]!r} is not an OpenHands conversation id") from exc
