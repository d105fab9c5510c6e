"""What the demo produces and how its summary is built from it."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convdb.infra.cli.run import send_task
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.producers.ledger import EMPTY, fold_ledger
from convdb.schemas import Codec, Event, LedgerRecord
from convdb.schemas.topics import EFFECTS, EVENTS

DEMO_TENANT = "demo"
"""Tenant of the demo's conversations (its API key is `demo-key`)."""


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
    delegation: dict[str, Any] = field(default_factory=dict)


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
    lambda p: {"delegation": p.delegation} if p.delegation else {},
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


def read_back(settings: Settings, codec: Codec, ids: set[str]) -> tuple[list[Any], list[Any]]:
    out: list[list[Any]] = []
    for topic in (EVENTS, EFFECTS):
        records = read_topic(settings, topic.name(settings.namespace))
        out.append(
            [
                codec.decode(m.value() or b"", expect=topic.value_types)
                for m in records
                if (m.key() or b"").decode() in ids
            ]
        )
    return out[0], out[1]


def last_seqs(parts: DemoParts) -> dict[str, int]:
    last: dict[str, int] = dict.fromkeys(parts.conversation_ids, 0)
    for event in parts.events:
        last[event.conversation_id] = max(last[event.conversation_id], event.seq)
    return last
