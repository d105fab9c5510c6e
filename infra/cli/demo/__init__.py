"""`convdb demo`: scripted conversations with real side effects, end to end, then their story.

Act 1 runs the tasks; act 2 kills a runner in the middle of a side effect and lets another
resume the conversation (`demo.crash`); the story is read back through the console's query
API (`demo.story`). `--json` prints the summary instead; `--keep` leaves it all running.

The tasks go to the inbox; fleet runners run them: one in this process (`--runners 1`, the
default) or N runner processes.

The summary is built by `build_summary(parts)` from `SUMMARY_SECTIONS`: each section is a
function of the collected `DemoParts` returning a dict fragment, so later issues add their
projections by appending a section.
"""

from __future__ import annotations

import argparse
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from convdb.infra.cli._common import bounded
from convdb.infra.cli.demo.crash import announce, console_server, finish
from convdb.infra.cli.demo.fleet import run_fleet_demo
from convdb.infra.cli.demo.parts import (
    DEMO_TENANT,
    DemoParts,
    build_summary,
    last_seqs,
    read_back,
    send_tasks,
)
from convdb.infra.cli.demo.progress import Progress
from convdb.infra.cli.demo.read import archive_proof, demo_settings, read_through_api, services
from convdb.infra.cli.run import broker_for
from convdb.infra.connection import broker_source, load_settings
from convdb.infra.dev.choice import BROKER_CHOICES, choose, describe
from convdb.infra.dev.tracker.process import ProviderProcess
from convdb.infra.settings import Settings
from convdb.producers.fleet.runner import FleetRunner, serve_until
from convdb.producers.fleet.service import build_context
from convdb.producers.status import STOP_STATUSES


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `demo` command."""
    p = sub.add_parser("demo", help="run scripted conversations with side effects and print a summary")
    p.add_argument(
        "--conversations", type=bounded(1, 10_000), default=3, metavar="N", help="how many (default 3)"
    )
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--keep", action="store_true", help="leave the stack and its console running until Ctrl-C")
    p.add_argument(
        "--runners", type=bounded(1, 64), default=1, metavar="N",
        help="run the conversations with N fleet runner processes (default 1: a runner in this process)",
    )  # fmt: skip
    p.add_argument(
        "--broker", choices=BROKER_CHOICES, default="auto",
        help="the broker it starts when none is configured: auto (default) is Apache Kafka where Java 17+ "
        "is on the machine (jars cached, or Maven to fetch them), else the embedded one",
    )  # fmt: skip
    p.set_defaults(func=_demo)


def run_conversations(
    settings: Settings, count: int, tracker_url: str, run_dir: Path, progress: Progress | None = None
) -> DemoParts:
    """Send `count` tasks through the inbox and run them with a fleet runner in this process
    (`progress`: told of each conversation as it stops)."""
    started = time.monotonic()
    progress = progress or Progress(enabled=False)
    workspace, ids = send_tasks(settings, count, run_dir)
    progress.line(f"{count} tasks sent to the inbox; a fleet runner in this process runs them")
    # The run's own snapshot store: the embedded broker does not outlive the command.
    ctx = build_context(settings, workspace, tracker_url, None, store=run_dir / "fleet.sqlite")

    def done(runner: FleetRunner) -> bool:
        convs = runner.conversations()
        progress.conversations(convs, ids)
        return runner.idle and all(c in convs and convs[c].status in STOP_STATUSES for c in ids)

    with progress.waiting("the agents are working"):
        runner = serve_until(ctx, done, 120)
    ctx.store.close()
    convs = [c for cid, c in runner.at_exit.items() if cid in ids]
    steps = sum(c.stats.steps for c in convs)
    overhead = sum(c.stats.overhead_ms - c.stats.step_publish_ms for c in convs) / steps if steps else 0.0
    statuses: dict[str, str] = {
        cid: runner.at_exit[cid].status if cid in runner.at_exit else "idle" for cid in ids
    }
    parts = DemoParts(settings, ids, statuses, step_overhead_ms=overhead)
    parts.events, parts.ledger = read_back(settings, ctx.codec, set(ids))
    parts.seconds = time.monotonic() - started
    return parts


def _demo(args: argparse.Namespace) -> int:
    settings = load_settings()
    progress = Progress(enabled=not args.json)
    progress.line("convdb demo: agent conversations on Kafka, read back through the query API")
    choice = choose(args.broker)
    if not settings.bootstrap_servers:
        progress.line(describe(choice))
    with ExitStack() as stack:
        with progress.waiting("starting the broker and local S3"):
            live = stack.enter_context(broker_for(settings, with_s3=True, broker=choice.kind))
        progress.line(f"broker at {live.bootstrap_servers} ({broker_words(settings, live)})")
        run_dir = live.data_dir.resolve() / "demo" / datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        run_dir.mkdir(parents=True, exist_ok=True)
        live = demo_settings(live, run_dir, DEMO_TENANT)
        with progress.waiting("starting the issue tracker, the read side and the console"):
            provider = stack.enter_context(ProviderProcess(run_dir / "provider.log"))
            stack.enter_context(services(live, run_dir))
            console_url = stack.enter_context(console_server(live, run_dir))
        announce(console_url, progress)
        if args.runners > 1:
            with progress.waiting(f"{args.runners} fleet runner processes are working"):
                parts = run_fleet_demo(live, args.conversations, provider.url, args.runners, run_dir)
        else:
            parts = run_conversations(live, args.conversations, provider.url, run_dir, progress)
        parts.provider_stats = provider.get("/stats")
        with progress.waiting("waiting for the read side to show every event"):
            parts.read_side = read_through_api(live, last_seqs(parts))
        progress.line("the read side shows every event: titles, stats, views and the effect ledger")
        if live.archive_url:
            with progress.waiting("checking the S3 archive against Kafka"):
                parts.archive = archive_proof(live, parts.conversation_ids[0])
            progress.line("the S3 archive holds the conversations, as Kafka does")
        finish(
            parts,
            live,
            run_dir,
            provider,
            console_url,
            keep=args.keep,
            as_json=args.json,
            summarize=lambda: build_summary(parts),
            progress=progress,
        )
        if not args.keep:
            progress.line("stopping the demo's processes")
    if not args.json:
        # Only now, with everything stopped, is this true.
        again = "" if args.keep else " Run `convdb demo --keep` to keep it all running and look around."
        print(f"The demo has stopped (its broker, read side and console with it).{again}", flush=True)
    finished = all(s == "finished" for s in parts.statuses.values())
    resumed = parts.crash_resume.get("status") == "finished"
    return 0 if finished and resumed else 1


def broker_words(configured: Settings, live: Settings) -> str:
    """Which broker the demo runs on, in a few words."""
    if configured.bootstrap_servers:
        return f"from {broker_source(configured)}"
    kind = "embedded Tansu" if live.kafka.embedded else "Apache Kafka"
    return f"{kind}, started for this demo: it stops when the demo ends"
