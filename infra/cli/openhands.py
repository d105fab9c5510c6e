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
import os
import re
import stat
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from convdb.infra.cli._common import (
    SECRETS_FILE_HELP,
    UsageError,
    identifier,
    require_broker,
    with_secrets_file,
)
from convdb.infra.cli._import_wait import InboxWatch
from convdb.infra.connection import load_settings
from convdb.infra.json_redaction import redact_json
from convdb.infra.producer import DurableProducer
from convdb.infra.secrets import SecretsRegistry, registry_for
from convdb.infra.settings import Settings
from convdb.projections.errors import ForeignRecordError
from convdb.projections.openhands import (
    ORIGIN,
    OpenHandsConversation,
    check_events,
    check_record,
    conversation_key,
)
from convdb.schemas import ExternalBatch, make_codec
from convdb.schemas.topics import INBOX
from convdb.schemas.validation import shown

EVENT_FILE = re.compile(r"^event-(?P<idx>\d{5,})-(?P<event_id>[0-9a-fA-F\-]{8,})\.json$")
"""OpenHands' event file name (openhands.sdk.conversation.persistence_const)."""

MAX_FILE_NAME = 255
"""Longest file name, in bytes, of the file systems OpenHands runs on (ext4, APFS)."""

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


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `import` command."""
    p = sub.add_parser("import", help="import conversations from another system (OpenHands)")
    p.add_argument("system", choices=("openhands",), help="where the conversations come from")
    p.add_argument(
        "dirs", nargs="+", type=Path, metavar="DIR", help="a FileStore directory or one conversation"
    )
    p.add_argument(
        "--tenant",
        type=identifier,
        default="default",
        help="tenant that will own the conversations (default: default)",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="S",
        help="wait up to S seconds until a runner appended them (or refused them: it says why)",
    )
    p.add_argument("--secrets-file", type=Path, metavar="FILE", help=SECRETS_FILE_HELP)
    p.set_defaults(func=_import)


def _import(args: argparse.Namespace) -> int:
    settings = with_secrets_file(load_settings(), args.secrets_file)
    jails = [Jail(d, settings.openhands.max_body_bytes) for d in args.dirs]
    found = [read_conversation(path, jail) for jail in jails for path in conversation_dirs(jail)]
    settings = require_broker(settings)
    secrets = registry_for(settings.secret_values())
    watch = InboxWatch(settings) if args.wait else None
    for conv in found:
        sent = publish(settings, conv, args.tenant, secrets)
        if watch is not None:
            watch.sent[conv.conversation_id] = sent
        skipped = f", {conv.skipped} event file(s) after an index gap ignored" if conv.skipped else ""
        print(f"{conv.conversation_id}: {len(conv.events)} events in {len(sent)} inbox record(s){skipped}")
    return watch.wait(args.wait) if watch is not None else 0


@dataclass(frozen=True)
class Jail:
    """The directory an import was given: nothing outside it is read, and no file beyond `cap`."""

    root: Path
    cap: int

    def inside(self, path: Path) -> Path:
        """`path` resolved, when it (after every symlink) is still inside the root."""
        try:
            resolved = path.resolve(strict=True)
            root = self.root.resolve(strict=True)
        except (OSError, RuntimeError) as exc:  # missing, or a symlink loop
            raise UsageError(f"{path}: cannot be read: {exc}") from exc
        if resolved != root and not resolved.is_relative_to(root):
            raise UsageError(f"{path}: a symlink out of {self.root} (to {resolved}); not followed")
        return resolved

    def is_file(self, path: Path) -> bool:
        """True for a regular file inside the root; a symlink out of it is refused (`UsageError`)."""
        return os.path.lexists(path) and stat.S_ISREG(self.inside(path).stat().st_mode)

    def is_dir(self, path: Path) -> bool:
        """True for a directory inside the root; a symlink out of it is refused (`UsageError`)."""
        return os.path.lexists(path) and self.inside(path).is_dir()

    def read(self, path: Path) -> bytes:
        """The bytes of a regular file inside the root, at most `cap` of them."""
        if not self.is_file(path):
            raise UsageError(f"{path}: not a regular file")
        with self.inside(path).open("rb") as handle:
            data = handle.read(self.cap + 1)
        if len(data) > self.cap:
            raise UsageError(f"{path}: larger than {self.cap} bytes (CONVDB_OPENHANDS__MAX_BODY_BYTES)")
        return data


def conversation_dirs(jail: Jail) -> list[Path]:
    """The jail's root when it is a conversation directory, else its conversation subdirectories."""
    root = jail.root
    if jail.is_file(root / "base_state.json"):
        return [root]
    if not jail.is_dir(root):
        raise UsageError(f"{root}: no such directory")
    found = sorted(p for p in root.iterdir() if jail.is_dir(p) and jail.is_file(p / "base_state.json"))
    if not found:
        raise UsageError(
            f"{root}: no OpenHands conversation (no base_state.json in it or its subdirectories)"
        )
    return found


def read_conversation(path: Path, jail: Jail) -> Found:
    """Read and check one conversation directory; `UsageError` names the file that is wrong."""
    base = _json(path / "base_state.json", jail)
    meta = _json(path / "meta.json", jail) if jail.is_file(path / "meta.json") else None
    files: dict[int, tuple[str, Path]] = {}
    events_dir = path / "events"
    for file in sorted(events_dir.iterdir()) if jail.is_dir(events_dir) else []:
        match = EVENT_FILE.match(file.name)
        if match:
            files[int(match["idx"])] = (match["event_id"], file)
    count = 0
    while count in files:
        count += 1
    events = []
    for idx in range(count):
        event_id, file = files[idx]
        event = _json(file, jail)
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


def _json(file: Path, jail: Jail) -> Any:
    try:
        return json.loads(jail.read(file).decode("utf-8"))
    except RecursionError as exc:
        raise UsageError(f"{file}: JSON nested too deep to read") from exc
    except (OSError, ValueError) as exc:
        raise UsageError(f"{file}: not readable JSON: {str(exc)[:200]}") from exc


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
    for payload_kind, text in out[-2 if conv.meta is not None else -1 :]:
        if len(text.encode()) > limit:
            raise UsageError(f"{conv.path}: {payload_kind} is larger than {limit} bytes")
    return out


def publish(
    settings: Settings, conv: Found, tenant_id: str, secrets: SecretsRegistry
) -> list[tuple[int, int]]:
    """Put one conversation in the inbox, credentials hidden, durable before returning; returns
    where each record landed (partition, offset)."""
    codec, producer = make_codec(settings.schema_registry_url), DurableProducer(settings)
    topic, now = INBOX.name(settings.namespace), datetime.now(UTC)
    try:
        deliveries = []
        for payload_kind, text in payloads(conv, settings.openhands.max_record_bytes):
            record = ExternalBatch(
                id=str(uuid.uuid4()),
                conversation_id=conv.conversation_id,
                tenant_id=tenant_id,
                timestamp=now,
                origin=ORIGIN,
                payload_kind=payload_kind,
                # Nothing of a file reaches the inbox (nor so the archive, the DLQ) unredacted.
                payload=redact_json(secrets, text),
            )
            deliveries.append(producer.produce_raw(topic, conv.conversation_id, codec.encode(record)))
        producer.flush()
    finally:
        producer.close()
    return [(d.partition, d.offset) for d in deliveries]


def write_conversation(root: Path, conv: OpenHandsConversation) -> Path:
    """Write one conversation as an OpenHands directory under `root`; refuses to overwrite one,
    and refuses (before writing anything) ids that cannot name its files."""
    names = _file_names(conv)
    path = root / uuid.UUID(conv.conversation_id).hex
    if path.exists() and any(path.iterdir()):
        raise UsageError(f"{path} exists and is not empty: export into another directory")
    (path / "events").mkdir(parents=True, exist_ok=True)
    (path / "base_state.json").write_text(_compact(conv.base_state), encoding="utf-8")
    for name, event in zip(names, conv.events, strict=True):
        (path / "events" / name).write_text(_compact(event), encoding="utf-8")
    if conv.meta is not None:
        (path / "meta.json").write_text(_compact(conv.meta), encoding="utf-8")
    if conv.extra:
        lines = "".join(_compact(record) + "\n" for record in conv.extra)
        (path / EXTRA_FILE).write_text(lines, encoding="utf-8")
    return path


def _file_names(conv: OpenHandsConversation) -> list[str]:
    """The event files' names (OpenHands names each by its event's id).

    Raises:
        UsageError: the conversation id is not a UUID, or an event id cannot be part of a file
            name (it holds '/', or makes the name longer than 255 bytes).
    """
    try:
        uuid.UUID(conv.conversation_id)
    except ValueError as exc:
        raise UsageError(
            f"conversation {shown(conv.conversation_id)} cannot be exported to OpenHands: its "
            "conversation ids are UUIDs; nothing was written"
        ) from exc
    names = []
    for idx, event in enumerate(conv.events):
        name = f"event-{idx:05d}-{event['id']}.json"
        if "/" in event["id"] or len(name.encode()) > MAX_FILE_NAME:
            raise UsageError(
                f"event {idx} (id {shown(event['id'])}) cannot be exported to OpenHands: its event "
                f"files are named by the event id, and a file name holds no '/' and at most "
                f"{MAX_FILE_NAME} bytes; nothing was written"
            )
        names.append(name)
    return names


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
