"""`convdb fork CONV --at SEQ [--as NEW_ID] [--branch]`: fork a conversation, or branch it, at an event.

The command goes to the inbox like a message (for a fork: the new conversation's inbox), and the
runner that owns the conversation carries it out. What the log already says is checked here first
(exit 2): the conversation exists for the tenant, the seq has an event a branch can start from,
a fork's new id is not taken.
"""

from __future__ import annotations

import argparse
import uuid
from datetime import UTC, datetime

from convdb.consumers.archive import export
from convdb.infra.cli._common import UsageError, conversation_id, identifier, positive, require_broker
from convdb.infra.connection import load_settings
from convdb.infra.producer import DurableProducer
from convdb.infra.settings import Settings
from convdb.projections import view
from convdb.projections.errors import ProjectionError
from convdb.schemas import InboxMessage, make_codec
from convdb.schemas.topics import INBOX


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `fork` command."""
    p = sub.add_parser(
        "fork", help="fork a conversation into a new one after an event, or (--branch) branch it there"
    )
    p.add_argument("conversation", type=conversation_id, metavar="CONV", help="conversation id")
    p.add_argument("--at", type=positive, required=True, metavar="SEQ", help="seq of the event (#SEQ)")
    p.add_argument(
        "--as",
        dest="new_id",
        type=conversation_id,
        metavar="NEW_ID",
        help="the new conversation's id (default: a uuid)",
    )
    p.add_argument(
        "--branch",
        action="store_true",
        help="switch CONV's active leaf to the event instead: the next message starts a new branch there",
    )
    p.add_argument("--tenant", type=identifier, default="default", help="tenant id (default: default)")
    p.set_defaults(func=_fork)


def _fork(args: argparse.Namespace) -> int:
    if args.branch and args.new_id is not None:
        raise UsageError("--as names a new conversation: a --branch stays in CONV")
    if args.new_id == args.conversation:
        raise UsageError(f"--as {args.new_id!r} is CONV itself: a fork needs a new id")
    settings = require_broker(load_settings())
    checked(settings, args.conversation, args.tenant, args.at)
    if args.branch:
        target, fields = args.conversation, {"at_seq": args.at}
    else:
        target = args.new_id or str(uuid.uuid4())
        if args.new_id is not None and log_of(settings, target).events:
            raise UsageError(f"conversation {target!r} already exists: a fork needs a new id")
        fields = {"at_seq": args.at, "source_conversation_id": args.conversation}
    record = InboxMessage(
        id=str(uuid.uuid4()),
        conversation_id=target,
        tenant_id=args.tenant,
        timestamp=datetime.now(UTC),
        command="branch" if args.branch else "fork",
        **fields,
    )
    DurableProducer(settings).send(
        INBOX.name(settings.namespace), target, make_codec(settings.schema_registry_url).encode(record)
    )
    if args.branch:
        print(f"branch of {args.conversation} at #{args.at}: queued; its runner switches the active leaf")
    else:
        print(f"fork of {args.conversation} at #{args.at} into {target}: queued; its runner writes it")
    return 0


def log_of(settings: Settings, conversation: str) -> export.Trajectory:
    """The conversation's events on Kafka (none: it does not exist)."""
    return export.from_kafka(settings, conversation, make_codec(settings.schema_registry_url))


def checked(settings: Settings, conversation: str, tenant: str, seq: int) -> None:
    """`UsageError` unless the tenant has the conversation and it has an event a branch can start
    from at `seq` (the runner's own rule, `view.node_at_seq`)."""
    events = log_of(settings, conversation).events
    if not events or events[0].tenant_id != tenant:
        raise UsageError(f"no conversation {conversation!r} for tenant {tenant!r}")
    try:
        view.node_at_seq(view.fold_all(view.initial(conversation), events), seq)
    except ProjectionError as exc:
        raise UsageError(str(exc)) from exc
