"""`convdb demo`: scripted conversations with real side effects, end to end, then their story.

Act 1 runs the tasks; act 2 kills a runner in the middle of a side effect and lets another
resume the conversation (`_demo_crash`); the story is read back through the console's query
API (`_demo_story`). `--json` prints the summary instead; `--keep` leaves it all running.

The tasks go to the inbox; fleet runners run them: one in this process (`--runners 1`, the
default) or N runner processes.

The summary is built by `build_summary(parts)` from `SUMMARY_SECTIONS`: each section is a
function of the collected `DemoParts` returning a dict fragment, so later issues add their
projections by appending a section.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from infra.cli._common import bounded, load_settings
from infra.cli._demo_crash import announce, console_server, finish
from infra.cli._demo_read import archive_proof, demo_settings, read_through_api, services
from infra.cli.run import broker_for, send_task
from infra.reader import read_topic
from infra.settings import Settings
from producers.fleet.__main__ import build_context
from producers.fleet.runner import FleetRunner, serve_until
from producers.ledger import EMPTY, fold_ledger
from producers.provider.process import ProviderProcess
from producers.status import STOP_STATUSES
from schemas import Codec, Event, LedgerRecord
from schemas.topics import EFFECTS, EVENTS

DEMO_TENANT = "demo"
"""Tenant of the demo's conversations (its API key is `demo-key`)."""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
    p.set_defaults(func=_demo)


@dataclass
class DemoParts:
    """What the demo produced, as read back from the topics and the provider."""

    settings: Settings
    conversation_ids: list[str]
    statuses: dict[str, str]
    events: list[Event] = field(default_factory=list)
    ledger: list[LedgerRecord] = field(default_factory=list)
    provider_stats: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    step_overhead_ms: float = 0.0
    read_side: dict[str, Any] = field(default_factory=dict)
    archive: dict[str, Any] = field(default_factory=dict)
    crash_resume: dict[str, Any] = field(default_factory=dict)


def task(index: int) -> str:
    """The scripted task of demo conversation `index`: read, write a file, create an issue."""
    return "\n".join(
        [
            f"Summarise notes-{index}.txt into report-{index}.txt and open an issue about it.",
            f'!read_file {{"path": "notes-{index}.txt"}}',
            f'!write_file {{"path": "report-{index}.txt", "content": "Summary: {{{{last}}}}"}}',
            f'+create_issue {{"title": "Report {index} ready", "body": "See report-{index}.txt"}}',
        ]
    )


def _events_section(parts: DemoParts) -> dict[str, Any]:
    kinds = Counter(e.kind for e in parts.events)
    return {"events": len(parts.events), "events_by_kind": dict(sorted(kinds.items()))}


def _effects_section(parts: DemoParts) -> dict[str, Any]:
    ops = EMPTY
    for record in parts.ledger:
        ops = fold_ledger(ops, record)
    return {"effects": dict(sorted(Counter(op.status for op in ops.values()).items()))}


SUMMARY_SECTIONS: list[Callable[[DemoParts], dict[str, Any]]] = [
    lambda p: {"conversations": len(p.conversation_ids), "statuses": dict(Counter(p.statuses.values()))},
    _events_section,
    _effects_section,
    lambda p: {"provider_mutations": p.provider_stats.get("mutations", 0)},
    lambda p: p.read_side,
    lambda p: p.archive,
    lambda p: {"seconds": round(p.seconds, 2), "step_overhead_ms": round(p.step_overhead_ms, 3)},
    lambda p: {"crash_resume": p.crash_resume} if p.crash_resume else {},
]
"""Sections of the summary, in order; append one to add keys."""


def build_summary(parts: DemoParts) -> dict[str, Any]:
    """The summary dict: every section's fragment merged in order."""
    summary: dict[str, Any] = {}
    for section in SUMMARY_SECTIONS:
        summary.update(section(parts))
    return summary


def send_tasks(settings: Settings, count: int, run_dir: Path) -> tuple[Path, list[str]]:
    """The workspace (one notes file per task) and the ids of `count` conversations whose task is
    on the inbox."""
    workspace = run_dir / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    ids = [f"demo-{uuid.uuid4().hex[:12]}" for _ in range(count)]
    for index, conversation_id in enumerate(ids, 1):
        (workspace / f"notes-{index}.txt").write_text(
            f"Notes {index}: the deploy of service {index} went fine."
        )
        send_task(settings, conversation_id, DEMO_TENANT, task(index))
    return workspace, ids


def run_conversations(settings: Settings, count: int, tracker_url: str, run_dir: Path) -> DemoParts:
    """Send `count` tasks through the inbox and run them with a fleet runner in this process."""
    started = time.monotonic()
    workspace, ids = send_tasks(settings, count, run_dir)
    # The run's own snapshot store: the embedded broker does not outlive the command.
    ctx = build_context(settings, workspace, tracker_url, None, store=run_dir / "fleet.sqlite")

    def done(runner: FleetRunner) -> bool:
        convs = runner.conversations()
        return runner.idle and all(c in convs and convs[c].status in STOP_STATUSES for c in ids)

    runner = serve_until(ctx, done, 120)
    ctx.store.close()
    convs = [c for cid, c in runner.at_exit.items() if cid in ids]
    steps = sum(c.stats.steps for c in convs)
    overhead = sum(c.stats.overhead_ms - c.stats.step_publish_ms for c in convs) / steps if steps else 0.0
    statuses = {cid: runner.at_exit[cid].status if cid in runner.at_exit else "idle" for cid in ids}
    parts = DemoParts(settings, ids, statuses, step_overhead_ms=overhead)
    parts.events, parts.ledger = _read_back(settings, ctx.codec, set(ids))
    parts.seconds = time.monotonic() - started
    return parts


def _read_back(settings: Settings, codec: Codec, ids: set[str]) -> tuple[list[Any], list[Any]]:
    out: list[list[Any]] = []
    for topic in (EVENTS, EFFECTS):
        records = read_topic(settings, topic.name(settings.namespace))
        out.append(
            [
                codec.decode(m.value(), expect=topic.value_types)
                for m in records
                if (m.key() or b"").decode() in ids
            ]
        )
    return out[0], out[1]


def _demo(args: argparse.Namespace) -> int:
    settings = load_settings()
    with broker_for(settings, with_s3=True) as live:
        run_dir = live.data_dir.resolve() / "demo" / datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        run_dir.mkdir(parents=True, exist_ok=True)
        live = demo_settings(live, run_dir, DEMO_TENANT)
        with (
            ProviderProcess(run_dir / "provider.log") as provider,
            services(live, run_dir),
            console_server(live, run_dir) as console_url,
        ):
            announce(console_url, args.json)
            if args.runners > 1:
                from infra.cli.runner import run_fleet_demo

                parts = run_fleet_demo(live, args.conversations, provider.url, args.runners, run_dir)
            else:
                parts = run_conversations(live, args.conversations, provider.url, run_dir)
            parts.provider_stats = provider.get("/stats")
            parts.read_side = read_through_api(live, _last_seqs(parts))
            if live.archive_url:
                parts.archive = archive_proof(live, parts.conversation_ids[0])
            finish(
                parts,
                live,
                run_dir,
                provider,
                console_url,
                keep=args.keep,
                as_json=args.json,
                summarize=lambda: build_summary(parts),
            )
    finished = all(s == "finished" for s in parts.statuses.values())
    resumed = parts.crash_resume.get("status") == "finished"
    return 0 if finished and resumed else 1


def _last_seqs(parts: DemoParts) -> dict[str, int]:
    last: dict[str, int] = dict.fromkeys(parts.conversation_ids, 0)
    for event in parts.events:
        last[event.conversation_id] = max(last[event.conversation_id], event.seq)
    return last
