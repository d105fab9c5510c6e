"""`python -m producers.runner`: a process that runs, resumes or serves conversations.

    run    --conversation ID "task"   start a conversation and run it to a stop state
    resume --conversation ID          recover a crashed conversation from the log and continue
    serve                             consume the inbox topic and run what arrives

Settings come from `CONVDB_*` (including the crash points `CONVDB_CRASH_AT`/`CONVDB_CRASH_TOOL`).
Prints one JSON line per conversation with its final status.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from pathlib import Path

from infra.settings import Settings
from producers.agent import Agent, ConfirmationPolicy
from producers.crashpoints import CrashPoints
from producers.inbox import InboxRunner
from producers.llm import LitellmClient, make_llm
from producers.publisher import EventPublisher
from producers.runtime import Runtime
from producers.secrets import SecretsRegistry
from producers.sink import DurableSink
from producers.tools import standard_tools
from schemas import make_codec


def build_runtime(
    settings: Settings,
    *,
    workspace: Path,
    tracker_url: str | None = None,
    secrets: dict[str, str] | None = None,
    model: str | None = None,
    confirmation: ConfirmationPolicy | None = None,
) -> tuple[Runtime, EventPublisher]:
    """The runtime with the standard tools, an idempotent publisher and the configured model."""
    codec = make_codec(settings.schema_registry_url)
    publisher = EventPublisher(settings, codec)
    agent = Agent(
        model=model or settings.llm.model,
        tools=standard_tools(workspace, tracker_url, settings.runtime.tool_timeout_s),
        confirmation=confirmation or ConfirmationPolicy(),
    )
    llm = make_llm(settings.llm, agent.model)
    if isinstance(llm, LitellmClient):
        llm.warm_up()  # pay the ~5 s import now, not inside the first step
    runtime = Runtime(
        settings,
        codec,
        agent,
        DurableSink(publisher),
        llm,
        secrets=SecretsRegistry(secrets),
        crash=CrashPoints(settings.crash_at, settings.crash_tool),
    )
    return runtime, publisher


def _secret(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line arguments."""
    p = argparse.ArgumentParser(prog="python -m producers.runner")
    p.add_argument("command", choices=("run", "resume", "serve"))
    p.add_argument("task", nargs="?", default="", help="the user's first message (run)")
    p.add_argument("--conversation", help="conversation id (run, resume)")
    p.add_argument("--tenant", default="default")
    p.add_argument("--workspace", type=Path, default=Path("workspace"))
    p.add_argument("--tracker-url", help="issue-tracker provider base URL")
    p.add_argument("--model", help="litellm model (default: settings)")
    p.add_argument("--secret", type=_secret, action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--idle-exit", type=float, default=0.0, help="serve: exit after this many idle seconds")
    args = p.parse_args(argv)
    if args.command in ("run", "resume") and not args.conversation:
        p.error(f"{args.command} needs --conversation")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = Settings()
    runtime, publisher = build_runtime(
        settings,
        workspace=args.workspace,
        tracker_url=args.tracker_url,
        secrets=dict(args.secret),
        model=args.model,
    )
    if args.command == "serve":
        return _serve(runtime, publisher, args.idle_exit)
    if args.command == "run":
        conv = runtime.create(args.conversation, args.tenant)
        conv.send_message(args.task)
        status = conv.run()
    else:
        conv = runtime.load(args.conversation, args.tenant)
        status = conv.resume()
    publisher.flush()
    print(json.dumps({"conversation": conv.conversation_id, "status": status}), flush=True)
    return 0


def _serve(runtime: Runtime, publisher: EventPublisher, idle_exit: float) -> int:
    stopping = False

    def on_term(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    last = [time.monotonic(), 0]

    def stop(runner: InboxRunner) -> bool:
        if runner.handled != last[1]:
            last[:] = [time.monotonic(), runner.handled]
        return stopping or bool(idle_exit and time.monotonic() - last[0] > idle_exit)

    runner = InboxRunner(runtime, publisher)
    runner.serve(stop)
    publisher.flush()
    for conv in runner.conversations.values():
        print(json.dumps({"conversation": conv.conversation_id, "status": conv.status}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
