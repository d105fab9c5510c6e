"""Resume: a long conversation taken over by a fleet runner, vs the file log.

convdb: the fleet's snapshot restore (`convdb.producers.fleet`): a new `PartitionOwner` restores the
partition from its snapshots (local store, or the state topic on another machine) plus the
events tail no snapshot covers, then rebuilds the conversation. It must equal the writer's.
Baseline: the same events as one JSON file each, listed, loaded and validated (OpenHands' file
event store; DESIGN §12: 1.9 s at 10k, 15.9 s at 50k).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from pydantic import TypeAdapter

from bench.common import BenchContext, BenchError, Figures, drop_namespace, median
from bench.filelog import load_log, write_log
from convdb.infra.partitioner import partition_for
from convdb.producers.conversation import Conversation
from convdb.producers.fleet.owner import FleetContext, PartitionOwner
from convdb.producers.fleet.service import build_context
from convdb.producers.fleet.store import SnapshotStore
from convdb.schemas import CondensationEvent, Event, MessageEvent

SNAPSHOT_EVERY = 100
"""K: a snapshot after this many uncovered events (the fleet default)."""
BATCH = 200
"""Events per writer transaction; each ends in a condensation (a real condenser bounds the view)."""
TAIL = 60
"""Events written after the last snapshot, which a restore must read from the events topic."""

FIGURES = {
    "resume_ms_1k": ("resume 1k-event conversation: fleet snapshot restore (local store)", "ms", "<= 250"),
    "resume_ms_10k": ("resume 10k-event conversation: fleet snapshot restore (local store)", "ms", "<= 250"),
    "resume_ms_50k": (
        "resume 50k-event conversation: fleet snapshot restore (local store)",
        "ms",
        "<= 250, flat",
    ),
    "resume_takeover_ms_10k": ("resume 10k incl. the new owner's fencing (init_transactions)", "ms", ""),
    "resume_changelog_ms_10k": (
        "resume 10k: snapshot restore from the state topic (empty data dir)",
        "ms",
        "",
    ),
    "baseline_resume_ms_1k": ("resume 1k: file-per-event log, list + load + validate", "ms", ""),
    "baseline_resume_ms_10k": ("resume 10k: file-per-event log, list + load + validate", "ms", ""),
    "baseline_resume_ms_50k": ("resume 50k: file-per-event log, list + load + validate", "ms", ""),
}


def run(ctx: BenchContext) -> Figures:
    """Per conversation size: median restore, re-read and baseline ms over `ctx.repeats` runs."""
    sizes = ((1_000, "1k"), (10_000, "10k"), (50_000, "50k")) if ctx.large else ((10_000, "10k"),)
    figures: Figures = {}
    for size, label in sizes:
        figures.update(_one_size(ctx, size, label))
    ctx.notes.append(
        f"resume: snapshot every {SNAPSHOT_EVERY} events, {BATCH}-event transactions each ending in a "
        f"condensation, {TAIL} events after the last snapshot; timed from the new owner's restore() call "
        "to the rebuilt conversation (not the fencing init_transactions before it)"
    )
    return figures


def _one_size(ctx: BenchContext, size: int, label: str) -> Figures:
    settings = ctx.fresh(f"resume{label}")
    llm = settings.llm.model_copy(update={"scripted_backend": "direct"})
    runtime = settings.runtime.model_copy(update={"snapshot_every": SNAPSHOT_EVERY})
    settings = settings.model_copy(update={"llm": llm, "runtime": runtime})
    try:
        fleet = build_context(settings, settings.data_dir / "workspace", None, None)
        cid = f"resume-{label}-{uuid.uuid4().hex[:8]}"
        partition = partition_for(cid, settings.partitions)
        writer = PartitionOwner(fleet, partition, None)
        writer.restore()
        conv = writer.create(cid, "bench")
        write_long_conversation(conv, size)
        expected = _fingerprint(conv)
        local = [_restore_ms(fleet, partition, cid, expected) for _ in range(ctx.repeats)]
        figures = {f"resume_ms_{label}": median([r for r, _ in local])}
        if label == "10k":
            figures["resume_takeover_ms_10k"] = median([t for _, t in local])
            remote = [_changelog_ms(ctx, fleet, partition, cid, expected) for _ in range(ctx.repeats)]
            figures["resume_changelog_ms_10k"] = median(remote)
        events = list(conv.state.view.log)
        root = write_log(ctx.workdir / f"resume-filelog-{label}", events)
        figures[f"baseline_resume_ms_{label}"] = median(
            [_baseline_ms(root, len(events)) for _ in range(ctx.repeats)]
        )
        ctx.notes.append(
            f"resume {label}: {conv.state.view.last_seq:,} events written, "
            f"view {len(conv.state.view.visible)}"
        )
        fleet.store.close()
        return figures
    finally:
        drop_namespace(settings)


def write_long_conversation(conv: Conversation, total: int) -> None:
    """About `total` events in transactions of BATCH ending in a condensation, then TAIL more."""
    conv.send_message("a very long task")
    while conv.state.view.last_seq < total - TAIL:
        conv.commit(lambda: _batch(conv))
    for _ in range(TAIL // 20):
        conv.commit(
            lambda: [
                conv.new(MessageEvent, source="agent", role="assistant", content="tail") for _ in range(20)
            ]
        )


def _batch(conv: Conversation) -> list[object]:
    out = []
    for i in range(BATCH - 1):
        role, source = ("user", "user") if i % 2 else ("assistant", "agent")
        out.append(conv.new(MessageEvent, source=source, role=role, content=f"turn {i} " + "x" * 80))
    # Forget everything but the first event and the last 20: the view stays short.
    forgotten = [e.id for e in conv.state.view.visible][1:] + [e.id for e in out][:-20]
    out.append(
        conv.new(
            CondensationEvent,
            source="agent",
            forgotten_event_ids=tuple(forgotten),
            summary=f"summary up to seq {conv.state.view.last_seq + BATCH - 1}",
        )
    )
    return out


Fingerprint = tuple[int, str | None, tuple[str, ...]]


def _fingerprint(conv: Conversation) -> Fingerprint:
    return conv.state.view.last_seq, conv.state.view.active_leaf, tuple(e.id for e in conv.state.view.visible)


def _check(found: Fingerprint, expected: Fingerprint, how: str) -> None:
    if found != expected:
        raise BenchError(
            f"resume ({how}): restored seq {found[0]}, view of {len(found[2])} events; "
            f"the writer had seq {expected[0]}, view of {len(expected[2])}"
        )


def _restore_ms(fleet: FleetContext, partition: int, cid: str, expected: Fingerprint) -> tuple[float, float]:
    """ms of the restore alone, and of the takeover (fencing the previous owner, then restore)."""
    takeover = time.perf_counter()
    owner = PartitionOwner(fleet, partition, None)
    started = time.perf_counter()
    report = owner.restore()
    done = time.perf_counter()
    _check(_fingerprint(owner.conversations[cid]), expected, "local store")
    tail = report["tail_events"].get(cid, 0)  # type: ignore[attr-defined]
    if report["source"] != "local" or tail > SNAPSHOT_EVERY:
        raise BenchError(f"resume: restore read from {report['source']} with a tail of {tail} events")
    owner.close()
    return (done - started) * 1000, (done - takeover) * 1000


def _changelog_ms(
    ctx: BenchContext, fleet: FleetContext, partition: int, cid: str, expected: Fingerprint
) -> float:
    store = SnapshotStore(ctx.workdir / f"resume-other-{uuid.uuid4().hex[:8]}.sqlite")
    other = FleetContext(fleet.settings, fleet.runtime, store)
    owner = PartitionOwner(other, partition, None)
    started = time.perf_counter()
    report = owner.restore()
    elapsed = (time.perf_counter() - started) * 1000
    _check(_fingerprint(owner.conversations[cid]), expected, "state topic")
    if report["source"] != "changelog":
        raise BenchError(f"resume: a restore with an empty data dir read from {report['source']}")
    owner.close()
    store.close()
    return elapsed


_EVENT = TypeAdapter(Event)


def _baseline_ms(root: Path, expected: int) -> float:
    started = time.perf_counter()
    events = load_log(root, _EVENT.validate_python)
    elapsed = (time.perf_counter() - started) * 1000
    if len(events) != expected:
        raise BenchError(f"resume: the file log held {len(events)} events, not {expected}")
    return elapsed
