"""Consumer memory: the RSS of a `convdb consume all` process as the events it consumed grow.

The events (agent-shaped, 1,000 conversations interleaved) are produced first; then one
`convdb consume all` child process (views, index, titles, stats, effects; SQLite store) reads
them all. Its resident set (`VmRSS` of /proc, and its anonymous part `RssAnon`) is sampled
with the events it has applied (its /metrics). SQLite's page cache (64 MB) and memory map
(256 MB of the file, counted in RSS as pages are touched) fill up as the store grows and then
stay at their configured size, so "flat" is judged over the second half of the run.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import (
    BenchContext,
    BenchError,
    Figures,
    consumer_events_applied,
    conversation,
    drop_namespace,
)
from bench.sinkrun import fill_topic
from convdb.infra.procs import free_port, spawn, stop_group, tail
from convdb.schemas import EventEnvelope
from convdb.schemas.topics import ALL_TOPICS

CONVERSATIONS = 1000
MARKS = (0.1, 0.25, 0.5, 0.75, 1.0)
"""Fractions of the events at which the RSS is reported."""

FIGURES = {
    "memory_rss_mb_50": ("consumer RSS after 50% of the events (consume all, SQLite)", "MB", ""),
    "memory_rss_mb_100": ("consumer RSS after all the events", "MB", ""),
    "memory_rss_growth": ("consumer RSS growth from 50% to 100% of the events", "ratio", "flat (<= 1.1)"),
    "memory_anon_growth": ("  its anonymous part (heap, page cache), 50% to 100%", "ratio", "flat (<= 1.1)"),
    "memory_rss_growth_25": ("consumer RSS growth from 25% to 100% (SQLite caches filling)", "ratio", ""),
    "memory_events": ("events consumed in the memory run", "events", ""),
}


def run(ctx: BenchContext) -> Figures:
    """One run (memory is not noisy the way rates are): RSS at fractions of the events consumed."""
    count = ctx.pick(200_000, 1_000_000)
    settings = ctx.fresh("memory", ALL_TOPICS)
    settings = settings.model_copy(update={"store_url": f"sqlite:///{settings.data_dir / 'store.db'}"})
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    log = settings.data_dir / "consume.log"
    child = None
    try:
        fill_topic(settings, lazily_interleaved(count))
        port = free_port()
        argv = [sys.executable, "-m", "convdb", "consume", "all", "--metrics-port", str(port)]
        child = spawn(argv, log, settings.to_env())
        rss = sample(child, port, log, count)
    finally:
        if child is not None:
            stop_group(child.pid)
        drop_namespace(settings)
    marks = ", ".join(f"{int(m * 100)}% {rss[m][0]:.0f} MB ({rss[m][1]:.0f} anon)" for m in MARKS)
    ctx.notes.append(
        f"memory: {count:,} events over {CONVERSATIONS:,} conversations, one `convdb consume all` "
        f"process; RSS at {marks}"
    )
    return {
        "memory_rss_mb_50": rss[0.5][0],
        "memory_rss_mb_100": rss[1.0][0],
        "memory_rss_growth": rss[1.0][0] / rss[0.5][0],
        "memory_anon_growth": rss[1.0][1] / rss[0.5][1],
        "memory_rss_growth_25": rss[1.0][0] / rss[0.25][0],
        "memory_events": float(count),
    }


def lazily_interleaved(count: int) -> Iterator[EventEnvelope]:
    """`count` events of `CONVERSATIONS` conversations round-robin, built as they are produced."""
    per = count // CONVERSATIONS
    streams = [conversation(f"mem-{c:04d}", per) for c in range(CONVERSATIONS)]
    for _ in range(per):
        for stream in streams:
            yield next(stream)


def sample(
    child: Any, port: int, log: Path, count: int, timeout: float = 1800.0
) -> dict[float, tuple[float, float]]:
    """(RSS, anonymous RSS) in MB when the child's applied events first reach each mark."""
    deadline = time.monotonic() + timeout
    rss: dict[float, tuple[float, float]] = {}
    while len(rss) < len(MARKS):
        if child.poll() is not None:
            raise BenchError(f"`convdb consume all` exited with {child.returncode}:\n{tail(log)}")
        if time.monotonic() > deadline:
            raise BenchError(f"memory: {count} events not consumed in {timeout}s:\n{tail(log)}")
        done = consumer_events_applied(port)
        for mark in MARKS:
            if mark not in rss and done >= mark * count:
                rss[mark] = _rss_mb(child.pid)
        time.sleep(0.05)
    return rss


def _rss_mb(pid: int) -> tuple[float, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon"):
            fields[name] = int(value.split()[0]) / 1024
    if len(fields) != 2:
        raise BenchError(f"no VmRSS/RssAnon for process {pid}")
    return fields["VmRSS"], fields["RssAnon"]
