"""`convdb tail`: print the records of a topic, decoded, from an offset or a time."""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any

from confluent_kafka import Message

from convdb.infra import dlq
from convdb.infra.cli._common import conversation_id, iso_timestamp, non_negative, positive, reachable_broker
from convdb.infra.connection import load_settings
from convdb.infra.reader import read_topic
from convdb.infra.records import coordinates, header_items
from convdb.schemas import AvroModel, Codec, make_codec
from convdb.schemas.errors import SchemaError
from convdb.schemas.topics import ALL_TOPICS, DLQ

TOPICS = {t.suffix: t for t in ALL_TOPICS}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `tail` command."""
    p = sub.add_parser("tail", help="print events (decoded) from an offset or a time")
    p.add_argument("--topic", choices=sorted(TOPICS), default="events", help="topic (default: events)")
    p.add_argument("--conversation", type=conversation_id, metavar="ID", help="only this conversation")
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "--from-offset", type=non_negative, metavar="N", help="start at offset N of each partition"
    )
    start.add_argument(
        "--from-timestamp", type=iso_timestamp, metavar="ISO", help="records at or after this time"
    )
    p.add_argument("--limit", type=positive, metavar="N", help="stop after N records")
    p.add_argument("--format", choices=("pretty", "json"), default="pretty", help="json: one object per line")
    p.add_argument("--follow", action="store_true", help="keep waiting for new records")
    p.set_defaults(func=_tail)


def _tail(args: argparse.Namespace) -> int:
    settings = reachable_broker(load_settings())
    codec = make_codec(settings.schema_registry_url)
    topic = TOPICS[args.topic]
    shown = 0
    records = read_topic(
        settings,
        topic.name(settings.namespace),
        from_offset=args.from_offset,
        from_timestamp=args.from_timestamp,
        follow=args.follow,
    )
    for msg in records:
        key = (msg.key() or b"").decode(errors="replace")
        if args.conversation and key != args.conversation:
            continue
        if topic is DLQ:
            letter = dead_letter(codec, msg)
            print(json.dumps(letter) if args.format == "json" else _pretty_letter(letter))
            shown += 1
            if args.limit and shown >= args.limit:
                break
            continue
        try:
            record = codec.decode(msg.value() or b"", expect=topic.value_types)
        except SchemaError as exc:
            print(f"{msg.topic()}[{msg.partition()}]@{msg.offset()}: undecodable: {exc}", file=sys.stderr)
            continue
        if args.from_timestamp and getattr(record, "timestamp", args.from_timestamp) < args.from_timestamp:
            continue
        if args.format == "json":
            print(json.dumps(record.model_dump(mode="json")), flush=False)
        else:
            _, partition, offset = coordinates(msg)
            print(_pretty(partition, offset, record))
        shown += 1
        if args.limit and shown >= args.limit:
            break
    sys.stdout.flush()
    return 0


def _pretty(partition: int, offset: int, record: AvroModel) -> str:
    data = record.model_dump(mode="json")
    head = f"[{partition}]@{offset} {data.get('timestamp', '')} {data.get('kind', '')}"
    ident = data.get("conversation_id", "")
    if "seq" in data:
        ident = f"{ident}#{data['seq']} {data.get('source', '')}"
    skip = {"id", "conversation_id", "tenant_id", "seq", "timestamp", "source", "parent_id", "kind"}
    body = {k: v for k, v in data.items() if k not in skip and v not in (None, "", [], False)}
    return f"{head} {ident} {json.dumps(body, ensure_ascii=False)}"


def dead_letter(codec: Codec, msg: Message) -> dict[str, Any]:
    """A DLQ record as data: where it came from, who refused it and why, and its original bytes.

    The value is shown decoded when it is a record convdb can read (refused for its content),
    else as base64 (refused because it could not be decoded).
    """
    headers = {k: (v or b"").decode(errors="replace") for k, v in header_items(msg)}
    value = msg.value() or b""
    letter: dict[str, Any] = {
        "partition": msg.partition(),
        "offset": msg.offset(),
        "key": (msg.key() or b"").decode(errors="replace"),
        "error_class": headers.get(dlq.ERROR_CLASS, ""),
        "error_message": headers.get(dlq.ERROR_MESSAGE, ""),
        "origin": f"{headers.get(dlq.ORIGINAL_TOPIC, '?')}[{headers.get(dlq.ORIGINAL_PARTITION, '?')}]"
        f"@{headers.get(dlq.ORIGINAL_OFFSET, '?')}",
        "refused_by": headers.get(dlq.CONSUMER, ""),
    }
    try:
        letter["record"] = codec.decode(value).model_dump(mode="json")
    except SchemaError:
        letter["value_base64"] = base64.b64encode(value).decode()
    return letter


def _pretty_letter(letter: dict[str, Any]) -> str:
    head = f"[{letter['partition']}]@{letter['offset']} {letter['key']} from {letter['origin']}"
    why = f"refused by {letter['refused_by'] or '?'}: {letter['error_class']}: {letter['error_message']}"
    body = letter.get("record") or {"value_base64": letter.get("value_base64", "")}
    return f"{head} {why} {json.dumps(body, ensure_ascii=False)}"
