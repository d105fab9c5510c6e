"""`convdb run "task"`: run one conversation to a stop state and print its events."""

from __future__ import annotations

import argparse
import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

from infra.cli._common import UsageError, load_settings
from infra.devstack import EphemeralStack
from infra.settings import Settings
from producers.runner import build_runtime
from schemas import Event


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the `run` command."""
    p = sub.add_parser("run", help="run one conversation to a stop state and print its events")
    p.add_argument("task", help="the user's message")
    p.add_argument("--model", help="litellm model, e.g. gpt-4o-mini (default: the scripted model)")
    p.add_argument("--conversation", metavar="ID", help="conversation id (default: a new uuid)")
    p.add_argument("--tenant", default="default", help="tenant id")
    p.add_argument(
        "--workspace", type=Path, help="folder the file tools work in (default: <data dir>/workspace)"
    )
    p.add_argument("--tracker-url", metavar="URL", help="issue-tracker provider for create_issue/notify")
    p.add_argument("--json", action="store_true", help="print one JSON object per event")
    p.set_defaults(func=_run)


@contextlib.contextmanager
def broker_for(settings: Settings, *, with_s3: bool) -> Iterator[Settings]:
    """The configured broker, or an embedded one for the duration of the command."""
    if settings.bootstrap_servers:
        from infra.kafka import apply_topics

        apply_topics(settings)
        yield settings
        return
    with EphemeralStack(settings, with_s3=with_s3) as stack:
        yield stack


def _run(args: argparse.Namespace) -> int:
    if not args.task.strip():
        raise UsageError("the task is empty")
    settings = load_settings()
    workspace = args.workspace or settings.data_dir / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    with broker_for(settings, with_s3=False) as live:
        runtime, publisher = build_runtime(
            live, workspace=workspace, tracker_url=args.tracker_url, model=args.model
        )
        if args.conversation:
            conv = runtime.load(args.conversation, args.tenant)
        else:
            conv = runtime.create(str(uuid.uuid4()), args.tenant)
        conv.send_message(args.task)
        status = conv.run()
        publisher.flush()
    for event in conv.state.log:
        print(json.dumps(event.model_dump(mode="json")) if args.json else format_event(event))
    if not args.json:
        print(f"conversation {conv.conversation_id}: {status}")
    return 0


def format_event(event: Event) -> str:
    """One readable line per event."""
    data = event.model_dump(mode="json")
    skip = {"id", "conversation_id", "tenant_id", "seq", "timestamp", "source", "parent_id", "kind"}
    body = {k: v for k, v in data.items() if k not in skip and v not in (None, "", [], False)}
    text = json.dumps(body, ensure_ascii=False)
    return f"#{event.seq:<3} {event.source:<11} {event.kind:<14} {text[:160]}"
