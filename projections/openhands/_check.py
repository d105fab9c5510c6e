"""Validation of OpenHands payloads, the same at the API (4xx) and in the runner (DLQ).

Stateless: everything that can be wrong with a payload on its own (shape, kinds, ids,
timestamps, Unicode, kind-specific fields) is found here, before anything is stored, so a
batch is accepted whole or refused whole.
"""

from __future__ import annotations

import json
from typing import Any, get_args

from convdb.projections.errors import ForeignRecordError
from convdb.projections.openhands._fields import check_json, event_id, parse_timestamp, require
from convdb.projections.openhands._kinds import KNOWN_KINDS, fields_of
from convdb.schemas._types import EventSource

ROOT_PARENT = "__root__"
"""OpenHands' parent_id of a root made after `navigate_to(None)`."""

RECORD_KINDS = ("conversation_info", "base_state", "meta")
"""Conversation-level payloads (one JSON object each) besides event batches."""

_SOURCES = frozenset(get_args(EventSource))


def clean(oh: dict[str, Any]) -> dict[str, Any]:
    """An event without its top-level nulls (OpenHands writes them only on the webhook: on disk
    `exclude_none` drops them, and the SDK reads both the same)."""
    return {k: v for k, v in oh.items() if v is not None}


def check_event(oh: Any, where: str) -> dict[str, Any]:
    """One OpenHands event, checked and cleaned.

    Raises:
        ForeignRecordError: not an object, unknown kind, bad id/timestamp/source/parent, or a
            kind-specific field is missing or of the wrong type.
    """
    if not isinstance(oh, dict):
        raise ForeignRecordError(f"{where}: an event must be a JSON object")
    kind = oh.get("kind")
    if not isinstance(kind, str) or kind not in KNOWN_KINDS:
        shown = kind[:80] if isinstance(kind, str) else kind
        raise ForeignRecordError(f"{where}: unknown event kind {shown!r} (OpenHands 1.58 kinds only)")
    where = f"{where} (id {str(oh.get('id'))[:40]}, kind {kind})"
    event_id(oh.get("id"), where)
    if oh["id"] == ROOT_PARENT:
        raise ForeignRecordError(f"{where}: `id` may not be {ROOT_PARENT!r}")
    parse_timestamp(oh.get("timestamp"), where)
    source = oh.get("source")
    if not isinstance(source, str) or source not in _SOURCES:
        raise ForeignRecordError(f"{where}: `source` must be one of {sorted(_SOURCES)}")
    if oh.get("parent_id") is not None:
        event_id(oh["parent_id"], where, "parent_id")
    check_json(oh, where)
    cleaned = clean(oh)
    fields_of(cleaned, where)
    return cleaned


def check_events(items: Any) -> list[dict[str, Any]]:
    """A batch of OpenHands events (the webhook's JSON array), checked and cleaned, in order.

    Raises:
        ForeignRecordError: the batch is not an array, is empty, repeats an id, or an event is bad.
    """
    if not isinstance(items, list):
        raise ForeignRecordError("the body must be a JSON array of OpenHands events")
    if not items:
        raise ForeignRecordError("the batch holds no events")
    seen: set[str] = set()
    out = []
    for index, item in enumerate(items):
        event = check_event(item, f"event {index}")
        if event["id"] in seen:
            raise ForeignRecordError(f"event {index}: id {event['id'][:40]} appears twice in the batch")
        seen.add(event["id"])
        out.append(event)
    check_unicode(out)
    return out


def check_record(payload_kind: str, record: Any) -> dict[str, Any]:
    """A conversation-level payload (`RECORD_KINDS`): a JSON object; state and info carry the id.

    Raises:
        ForeignRecordError: unknown payload kind, not an object, or `id` missing where required.
    """
    if payload_kind not in RECORD_KINDS:
        raise ForeignRecordError(f"unknown OpenHands payload kind {payload_kind[:40]!r}")
    if not isinstance(record, dict):
        raise ForeignRecordError(f"{payload_kind}: must be a JSON object")
    check_json(record, payload_kind)
    if payload_kind != "meta":
        require(record, "id", str, payload_kind)
    if record.get("title") is not None:
        require(record, "title", str, payload_kind)
    check_unicode(record)
    return record


def check_unicode(value: Any) -> None:
    """Text that Avro (UTF-8) can store: JSON allows lone surrogates (`\\ud800`), Avro does not."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ForeignRecordError(f"text is not valid Unicode (lone surrogate at {exc.start})") from exc
