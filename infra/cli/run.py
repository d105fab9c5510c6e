"""`convdb run "task"`: run one conversation to a stop state and print its events.

The task goes to the conversation's inbox and a fleet runner in this process (a member of the
namespace's runner group, like `convdb runner`) runs it: the one runtime, here in-process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from convdb.infra.cli._common import (
    AGENT_HELP,
    GRAPH_HELP,
    SECRETS_FILE_HELP,
    UsageError,
    conversation_id,
    identifier,
    reachable_broker,
    with_secrets_file,
)
from convdb.infra.connection import load_settings
from convdb.infra.dev.devstack import EphemeralStack
from convdb.infra.errors import InfraError
from convdb.infra.producer import DurableProducer
from convdb.infra.secrets import SecretsRegistry
from convdb.infra.settings import Settings
from convdb.producers.errors import AgentLoadError, UnknownAgentError
from convdb.producers.fleet.runner import FleetRunner, serve_until
from convdb.producers.fleet.service import build_context
from convdb.producers.status import STOP_STATUSES
from convdb.schemas import Event, InboxMessage, make_codec
from convdb.schemas.topics import INBOX

RUN_TIMEOUT_S = 900.0
"""How long `convdb run` waits for its conversation to reach a stop status."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `run` command."""
    p = sub.add_parser("run", help="run one conversation to a stop state and print its events")
    p.add_argument("task", help="the user's message")
    p.add_argument("--model", help="litellm model, e.g. gpt-4o-mini (default: the scripted model)")
    p.add_argument(
        "--conversation", type=conversation_id, metavar="ID", help="conversation id (default: a new uuid)"
    )
    p.add_argument("--agent", metavar="NAME|MODULE:ATTR", help=AGENT_HELP)
    p.add_argument("--graph", metavar="NAME|MODULE:ATTR", help=GRAPH_HELP)
    p.add_argument("--tenant", type=identifier, default="default", help="tenant id")
    p.add_argument(
        "--workspace", type=Path, help="folder the file tools work in (default: <data dir>/workspace)"
    )
    p.add_argument("--tracker-url", metavar="URL", help="issue-tracker provider for create_issue/notify")
    p.add_argument("--json", action="store_true", help="print one JSON object per event")
    p.add_argument("--secrets-file", type=Path, metavar="FILE", help=SECRETS_FILE_HELP)
    p.set_defaults(func=_run)


@contextlib.contextmanager
def broker_for(settings: Settings, *, with_s3: bool, broker: str = "embedded") -> Iterator[Settings]:
    """The configured broker, or one for the duration of the command (`broker`: its kind)."""
    if settings.bootstrap_servers:
        from convdb.infra.kafka import apply_topics

        apply_topics(reachable_broker(settings))
        yield settings
        return
    with EphemeralStack(settings, with_s3=with_s3, broker=broker) as stack:
        yield stack


def _run(args: argparse.Namespace) -> int:
    if not args.task.strip():
        raise UsageError("the task is empty")
    settings = with_secrets_file(load_settings(), args.secrets_file)
    workspace = args.workspace or settings.data_dir / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    cid = args.conversation or str(uuid.uuid4())
    # An embedded broker lives as long as this command: its snapshots must not outlive it.
    store = (
        settings.data_dir / "run" / f"{uuid.uuid4().hex}.sqlite" if not settings.bootstrap_servers else None
    )
    if not settings.bootstrap_servers:
        print(
            "convdb run: no broker configured and no dev stack running: an embedded broker for this "
            "command only, so the conversation is gone when it ends (`convdb dev up` keeps one)",
            file=sys.stderr,
            flush=True,
        )
    with broker_for(settings, with_s3=False) as live:
        try:
            ctx = build_context(
                live, workspace, args.tracker_url, args.model, store=store, agent=args.agent, graph=args.graph
            )
        except (UnknownAgentError, AgentLoadError) as exc:
            raise UsageError(str(exc)) from exc
        message_id = send_task(live, cid, args.tenant, args.task, agent=args.agent)

        def done(runner: FleetRunner) -> bool:
            conv = runner.conversations().get(cid)
            if conv is None or message_id not in conv.state.view.events:
                return False
            return runner.idle and conv.status in STOP_STATUSES

        runner = serve_until(ctx, done, RUN_TIMEOUT_S)
        ctx.store.close()
    conv = runner.at_exit.get(cid)
    if conv is None or message_id not in conv.state.view.events or conv.status not in STOP_STATUSES:
        raise InfraError(
            f"conversation {cid} did not stop within {RUN_TIMEOUT_S:.0f}s "
            "(is its inbox partition owned by another runner of this namespace?)"
        )
    for event in conv.state.view.log:
        print(json.dumps(event.model_dump(mode="json")) if args.json else format_event(event))
    if not args.json:
        print(f"conversation {cid}: {conv.status}")
    return 0


def send_task(
    settings: Settings, conversation_id: str, tenant_id: str, text: str, *, agent: str | None = None
) -> str:
    """Put a user message on the conversation's inbox (durable, secrets redacted); returns its id.

    `agent`: the agent that runs the conversation (None: the runner's default)."""
    message = SecretsRegistry(settings.secret_values()).redact_record(
        InboxMessage(
            id=str(uuid.uuid4()),
            conversation_id=conversation_id,
            tenant_id=tenant_id,
            timestamp=datetime.now(UTC),
            command="message",
            content=text,
            agent=agent,
        )  # fmt: skip
    )
    codec = make_codec(settings.schema_registry_url)
    DurableProducer(settings).send(INBOX.name(settings.namespace), conversation_id, codec.encode(message))
    return message.id


def format_event(event: Event) -> str:
    """One readable line per event."""
    data = event.model_dump(mode="json")
    skip = {"id", "conversation_id", "tenant_id", "seq", "timestamp", "source", "parent_id", "kind"}
    body = {k: v for k, v in data.items() if k not in skip and v not in (None, "", [], False)}
    text = json.dumps(body, ensure_ascii=False)
    return f"#{event.seq:<3} {event.source:<11} {event.kind:<14} {text[:160]}"
