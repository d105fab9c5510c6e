"""Takeover of one partition holding N conversations, each with its snapshot.

A topic set of one partition is filled in this process: N conversations, each run once by a
`PartitionOwner` (as a runner does; a run ends with a snapshot), so the partition's state topic
holds N snapshots. A few of them (the probes) are then sent a message, and a `convdb runner` with
an empty data dir (a machine that never owned the partition: it restores from the state topic)
is started. From the moment it began taking the partition (the start of its assignment callback,
the `began` of its `assigned` line), the time to the first probe's step and to the last one: how
soon a partition of N conversations starts serving, and how soon a conversation anywhere in it is
served.
"""

from __future__ import annotations

import random
from typing import Any

from bench.common import BenchContext, BenchError, Figures, drop_namespace
from bench.fleetprocs import TENANT, RunnerChild, conversation_ids, namespace, read_steps, send_all, wait_for
from bench.fleetstats import growth_exponent
from convdb.infra.settings import Settings
from convdb.producers.fleet.owner import PartitionOwner
from convdb.producers.fleet.service import build_context


def label(n: int) -> str:
    """A size as the figure keys name it (100, 1k, 10k)."""
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


LABELS = {n: label(n) for n in (100, 1_000, 10_000)}
"""The bench's sizes (the smoke test's smaller ones are keyed the same way)."""


def _meta() -> dict[str, tuple[str, str, str]]:
    meta = {}
    for n, key in LABELS.items():
        meta[f"fleet_takeover_first_s_{key}"] = (
            f"takeover of a partition of {n} conversations: start -> first probe served",
            "s",
            "",
        )
        meta[f"fleet_takeover_all_s_{key}"] = (
            f"takeover of a partition of {n} conversations: start -> every probe served",
            "s",
            "<= 2 at 1k" if n == 1_000 else "",
        )
        meta[f"fleet_takeover_restore_ms_{key}"] = (
            f"takeover of {n} conversations: the partition's read the runner reports",
            "ms",
            "",
        )
        meta[f"fleet_takeover_callback_ms_{key}"] = (
            f"takeover of {n} conversations: assignment callback (fence, read, restore what may have work)",
            "ms",
            "",
        )
        meta[f"fleet_takeover_restored_all_s_{key}"] = (
            f"takeover of a partition of {n} conversations: start -> every conversation restored",
            "s",
            "",
        )
    meta["fleet_takeover_growth"] = (
        "takeover growth: slope of log(every probe served) over log(conversations)",
        "exponent",
        "< 1 (sub-linear)",
    )
    return meta


FIGURES = _meta()


def curve(ctx: BenchContext, sizes: tuple[int, ...], probes: int) -> Figures:
    """The takeover figures per size, and the growth exponent over the sizes."""
    figures: Figures = {}
    every: list[float] = []
    for n in sizes:
        key = label(n)
        found = _one(ctx, n, probes)
        figures.update({f"fleet_takeover_{name}_{key}": value for name, value in found.items()})
        every.append(found["all_s"])
    if len(sizes) > 1:
        figures["fleet_takeover_growth"] = growth_exponent(list(sizes), every)
    ctx.notes.append(
        f"fleet takeover: one partition of {', '.join(f'{n:,}' for n in sizes)} conversations, each run "
        f"once (snapshot at its stop); {probes} of them sent a message before a `convdb runner` with an "
        "empty data dir (restore from the state topic) starts; times from its taking the partition (the "
        "start of its assignment callback: fencing and restore included) to the first and the last "
        "probe's step, and to the runner's `restored_all` line (the quiet conversations are restored "
        "after the partition serves); growth 1 = linear"
    )
    return figures


def _one(ctx: BenchContext, n: int, probes: int) -> dict[str, float]:
    settings = namespace(ctx, f"takeover{n}", 1, 0.0)
    try:
        cids = conversation_ids("held", n)
        _fill(settings, cids)
        asked = random.Random(n).sample(cids, min(probes, n))
        send_all(settings, asked, "are you there")
        child = settings.model_copy(update={"data_dir": settings.data_dir / "taker"})
        runner = RunnerChild(
            "taker", child, settings.data_dir / "taker.log", settings.data_dir / "ws"
        ).start()
        try:
            wait_for(
                lambda: _answered(settings, asked) and _restored(runner) is not None,
                120 + n / 50,
                f"{len(asked)} probes served and every conversation restored",
                [runner],
                0.5,
            )
        finally:
            runner.stop()
        return _times(runner, settings, asked)
    finally:
        drop_namespace(settings)


def _fill(settings: Settings, cids: list[str]) -> None:
    """N conversations in partition 0, each run once through its partition's transactional writer."""
    ctx = build_context(
        settings, settings.data_dir / "ws", None, None, store=settings.data_dir / "fill.sqlite"
    )
    owner = PartitionOwner(ctx, 0, None)
    owner.restore()
    for cid in cids:
        conv = owner.create(cid, TENANT)
        conv.send_message("hello")
        conv.run()
    owner.close()
    ctx.store.close()


def _answered(settings: Settings, asked: list[str]) -> bool:
    times = read_steps(settings).times
    return all(len(times.get(cid, [])) >= 2 for cid in asked)


def _assigned(runner: RunnerChild) -> tuple[dict[str, Any], dict[str, Any]]:
    """The runner's first `assigned` line for partition 0, and the restore it reports there."""
    assigned = [
        line for line in runner.lines() if line["event"] == "assigned" and 0 in line.get("partitions", [])
    ]
    if not assigned:
        raise BenchError(f"takeover: the runner never reported partition 0 assigned: {runner.log}")
    reports = [
        r for r in assigned[0].get("restored") or [] if isinstance(r, dict) and r.get("partition") == 0
    ]
    return assigned[0], reports[0] if reports else {}


def _restored(runner: RunnerChild) -> float | None:
    """When every conversation of partition 0 was restored: its `restored_all` line, else (none
    was pending) the end of the assignment callback; None before that."""
    lines = runner.lines()
    done = [float(line["at"]) for line in lines if line["event"] == "restored_all" and line["partition"] == 0]
    if done:
        return done[0]
    if not any(line["event"] == "assigned" for line in lines):
        return None
    line, report = _assigned(runner)
    return float(line["at"]) if not report.get("pending") else None


def _times(runner: RunnerChild, settings: Settings, asked: list[str]) -> dict[str, float]:
    """From the moment the runner began taking partition 0 (its assignment callback's start:
    fencing, reading and restoring included): the first and the last probe served and every
    conversation restored; and the read and the callback's time."""
    line, report = _assigned(runner)
    began = float(line["began"])
    times = read_steps(settings).times
    served = [times[cid][-1] - began for cid in asked]
    figures = {
        "first_s": min(served),
        "all_s": max(served),
        "callback_ms": (float(line["at"]) - began) * 1000,
    }
    if "ms" in report:
        figures["restore_ms"] = float(report["ms"])
    restored = _restored(runner)
    if restored is not None:
        figures["restored_all_s"] = restored - began
    return figures
