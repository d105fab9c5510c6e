"""`convdb export`: write one conversation's full trajectory (jsonl or Avro), from Kafka or the archive."""

from __future__ import annotations

import argparse
import re
import sys
import uuid
from pathlib import Path

from convdb.consumers.archive import export
from convdb.infra.cli._common import UsageError, conversation_id, require_broker
from convdb.infra.cli.replay import open_reader
from convdb.infra.connection import load_settings
from convdb.infra.settings import Settings
from convdb.schemas import make_codec


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `export` command."""
    p = sub.add_parser("export", help="write a conversation's full trajectory in order")
    p.add_argument("conversation", type=conversation_id, metavar="CONV", help="conversation id")
    p.add_argument(
        "directory", nargs="?", type=Path, metavar="DIR", help="with --format openhands: where to write it"
    )
    p.add_argument(
        "--format",
        choices=("jsonl", "avro", "openhands"),
        default="jsonl",
        help="jsonl (default), avro, or openhands (a conversation directory the OpenHands SDK loads)",
    )
    p.add_argument("--source", choices=("kafka", "archive"), default="kafka", help="where to read")
    p.add_argument("--output", "-o", type=Path, metavar="FILE", help="write here instead of stdout")
    p.set_defaults(func=_export, late_positional="directory")


def trajectory(settings: Settings, conversation_id: str, source: str) -> export.Trajectory:
    """A conversation's trajectory from a source; `UsageError` when it has no events there."""
    codec = make_codec(settings.schema_registry_url)
    if source == "archive":
        reader = open_reader(settings)
        try:
            found = export.from_archive(settings, reader, conversation_id, codec)
        finally:
            reader.close()
    else:
        found = export.from_kafka(require_broker(settings), conversation_id, codec)
    if not found.events:
        raise UsageError(f"conversation {conversation_id!r} has no events in {source}")
    return found


def _export(args: argparse.Namespace) -> int:
    if args.format == "openhands":
        return _export_openhands(args)
    if args.directory is not None:
        raise UsageError("DIR is only for --format openhands (use --output FILE)")
    found = trajectory(load_settings(), args.conversation, args.source)
    data = export.render(found, args.format)
    if args.output:
        args.output.write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    if found.undecodable:
        print(f"convdb: {found.undecodable} undecodable record(s) skipped", file=sys.stderr)
    return 0


def _export_openhands(args: argparse.Namespace) -> int:
    from convdb.infra.cli.openhands import write_conversation
    from convdb.projections.openhands import export as to_openhands

    root = Path(args.directory) if args.directory else args.output
    if root is None:
        raise UsageError("--format openhands needs a directory: convdb export CONV --format openhands DIR")
    cid = args.conversation
    if re.fullmatch(r"[0-9a-fA-F]{32}", cid):
        cid = str(uuid.UUID(cid))  # an OpenHands id as its directory spells it
    try:
        uuid.UUID(cid)
    except ValueError as exc:
        # Checked before anything is read: OpenHands names a conversation's directory by its UUID.
        raise UsageError(
            f"conversation {cid!r} cannot be exported to OpenHands: OpenHands conversation ids are UUIDs "
            "(e.g. 0c7e4f8e-...; conversations imported from OpenHands or created through the API have "
            "one), and this id is not one; --format jsonl or avro export any conversation"
        ) from exc
    found = trajectory(load_settings(), cid, args.source)
    path = write_conversation(root, to_openhands(cid, found.events))
    print(f"{cid}: {path}")
    return 0
