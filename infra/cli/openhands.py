"""`convdb import openhands DIR...`, and the directory writer behind `convdb export --format openhands`.

An OpenHands conversation directory is ``<id hex>/base_state.json``, ``events/event-NNNNN-<event
id>.json`` (index contiguous from 0) and, from an agent-server, ``meta.json``. Import checks every
file first, then puts the conversation in the inbox topic as `ExternalBatch` records (events in
order, then base_state and meta), durable before it returns; the runner that owns the
conversation appends them, skipping ids it already holds, so importing twice adds nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from infra.cli._common import UsageError, load_settings, require_broker
from infra.producer import DurableProducer
from infra.settings import Settings
from projections.errors import ForeignRecordError
from projections.openhands import ORIGIN, OpenHandsConversation, check_events, check_record, conversation_key
from schemas import ExternalBatch, make_codec
from schemas.topics import INBOX

EVENT_FILE = re.compile(r"^event-(?P<idx>\d{5,})-(?P<event_id>[0-9a-fA-F\-]{8,})\.json$")
"""OpenHands' event file name (openhands.sdk.conversation.persistence_const)."""

EXTRA_FILE = "convdb-openhands.jsonl"
"""Records OpenHands keeps nowhere on disk (full_state updates, ConversationInfo posts), on export."""


@dataclass
class Found:
    """One OpenHands conversation directory, read and checked."""

    path: Path
    conversation_id: str
    base_state: dict[str, Any]
    events: list[dict[str, Any]]
    meta: dict[str, Any] | None
    skipped: int
    """Event files after a gap in the index (the SDK does not read them either)."""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the `import` command."""
    p = sub.add_parser("import", help="import conversations from another system (OpenHands)")
    p.add_argument("system", choices=("openhands",), help="where the conversations come from")
    p.add_argument(
        "dirs", nargs="+", type=Path, metavar="DIR", help="a FileStore directory or one conversation"
    )
    p.add_argument(
        "--tenant", default="default", help="tenant that will own the conversations (default: default)"
    )
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="S",
        help="wait up to S seconds until a runner appended them",
    )
    p.set_defaults(func=_import)


def _import(args: argparse.Namespace) -> int:
    found = [read_conversation(path) for d in args.dirs for path in conversation_dirs(d)]
    settings = require_broker(load_settings())
    for conv in found:
        records = publish(settings, conv, args.tenant)
        skipped = f", {conv.skipped} event file(s) after an index gap ignored" if conv.skipped else ""
        print(f"{conv.conversation_id}: {len(conv.events)} events in {records} inbox record(s){skipped}")
    if args.wait:
        return _wait(settings, found, args.wait)
    return 0


def conversation_dirs(root: Path) -> list[Path]:
    """`root` when it is a conversation directory, else its conversation subdirectories."""
    if (root / "base_state.json").is_file():
        return [root]
    if not root.is_dir():
        raise UsageError(f"{root}: no such directory")
    found = sorted(p for p in root.iterdir() if (p / "base_state.json").is_file())
    if not found:
        raise UsageError(
            f"{root}: no OpenHands conversation (no base_state.json in it or its subdirectories)"
        )
    return found


def read_conversation(path: Path) -> Found:
    """Read and check one conversation directory; `UsageError` names the file that is wrong."""
    base = _json(path / "base_state.json")
    meta = _json(path / "meta.json") if (path / "meta.json").is_file() else None
    files: dict[int, tuple[str, Path]] = {}
    events_dir = path / "events"
    for file in sorted(events_dir.iterdir()) if events_dir.is_dir() else []:
        match = EVENT_FILE.match(file.name)
        if match:
            files[int(match["idx"])] = (match["event_id"], file)
    count = 0
    while count in files:
        count += 1
    events = []
    for idx in range(count):
        event_id, file = files[idx]
        event = _json(file)
        if not isinstance(event, dict) or event.get("id") != event_id:
            raise UsageError(f"{file}: the file name says event {event_id}, the file holds another")
        events.append(event)
    try:
        cid = conversation_key(base.get("id") if isinstance(base, dict) else None, f"{path}/base_state.json")
        if path.name != uuid.UUID(cid).hex and path.name != cid:
            raise UsageError(f"{path}: the directory name is not its conversation id {uuid.UUID(cid).hex}")
        checked = check_events(events) if events else []
        check_record("base_state", base)
        if meta is not None:
            check_record("meta", meta)
    except ForeignRecordError as exc:
        raise UsageError(f"{path}: {exc}") from exc
    return Found(path, cid, base, checked, meta, len(files) - count)


def _json(file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{file}: not readable JSON: {exc}") from exc


def payloads(conv: Found, limit: int) -> list[tuple[str, str]]:
    """(payload_kind, JSON text) inbox payloads: events in chunks under `limit` bytes, then the state."""
    out: list[tuple[str, str]] = []
    chunk: list[str] = []
    size = 2
    for event in conv.events:
        text = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        if len(text.encode()) + 2 > limit:
            raise UsageError(f"{conv.path}: event {event['id']} is larger than {limit} bytes")
        if chunk and size + len(text.encode()) + 1 > limit:
            out.append(("events", "[" + ",".join(chunk) + "]"))
            chunk, size = [], 2
        chunk.append(text)
        size += len(text.encode()) + 1
    if chunk:
        out.append(("events", "[" + ",".join(chunk) + "]"))
    out.append(("base_state", json.dumps(conv.base_state, separators=(",", ":"), ensure_ascii=False)))
    if conv.meta is not None:
        out.append(("meta", json.dumps(conv.meta, separators=(",", ":"), ensure_ascii=False)))
    return out


def publish(settings: Settings, conv: Found, tenant_id: str) -> int:
    """Put one conversation in the inbox, durable before returning; returns the record count."""
    codec, producer = make_codec(settings.schema_registry_url), DurableProducer(settings)
    topic, now = INBOX.name(settings.namespace), datetime.now(UTC)
    try:
        items = payloads(conv, settings.openhands.max_record_bytes)
        for payload_kind, text in items:
            record = ExternalBatch(
                id=str(uuid.uuid4()),
                conversation_id=conv.conversation_id,
                tenant_id=tenant_id,
                timestamp=now,
                origin=ORIGIN,
                payload_kind=payload_kind,
                payload=text,
            )
            producer.produce_raw(topic, conv.conversation_id, codec.encode(record))
        producer.flush()
    finally:
        producer.close()
    return len(items)


def _wait(settings: Settings, found: list[Found], seconds: float) -> int:
    from infra.cli.export import trajectory

    deadline = time.monotonic() + seconds
    pending = {c.conversation_id: len(c.events) for c in found}
    while pending and time.monotonic() < deadline:
        for cid, count in list(pending.items()):
            try:
                held = trajectory(settings, cid, "kafka").events
            except UsageError:
                continue
            if sum(1 for e in held if e.extension and ORIGIN in e.extension) >= count:
                print(f"{cid}: appended")
                del pending[cid]
        time.sleep(0.5)
    for cid in pending:
        print(f"convdb: {cid} is queued but not appended yet: is a `convdb runner` running?", file=sys.stderr)
    return 1 if pending else 0


def write_conversation(root: Path, conv: OpenHandsConversation) -> Path:
    """Write one conversation as an OpenHands directory under `root`; refuses to overwrite one."""
    path = root / uuid.UUID(conv.conversation_id).hex
    if path.exists() and any(path.iterdir()):
        raise UsageError(f"{path} exists and is not empty: export into another directory")
    (path / "events").mkdir(parents=True, exist_ok=True)
    (path / "base_state.json").write_text(_compact(conv.base_state), encoding="utf-8")
    for idx, event in enumerate(conv.events):
        (path / "events" / f"event-{idx:05d}-{event['id']}.json").write_text(
            _compact(event), encoding="utf-8"
        )
    if conv.meta is not None:
        (path / "meta.json").write_text(_compact(conv.meta), encoding="utf-8")
    if conv.extra:
        lines = "".join(_compact(record) + "\n" for record in conv.extra)
        (path / EXTRA_FILE).write_text(lines, encoding="utf-8")
    return path


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
