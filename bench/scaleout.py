"""Scale-out: `convdb consume all` as one process and as two in one group over 4 partitions.

Real child processes (`python -m infra.cli.main consume all`), one SQLite store (the two
processes' write transactions take turns in it; their decoding and folding run in parallel)
and, when reachable, one PostgreSQL schema (they write at once). The consumers start first and
settle their assignment (two partitions each); then the events are produced as fast as
possible, and the rate is the events over the time from the first produce to the moment the
children's metrics count every event applied. Exactly-once under this shape is a test
(`tests/consumers/test_exactly_once.py`), not a benchmark.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import BenchContext, BenchError, Figures, consumer_events_applied, drop_namespace, median
from bench.sink import PG_DEFAULT, _pg_reachable, interleaved, pg_schema
from bench.sinkrun import fill_topic
from convdb.infra.procs import free_port, spawn, stop_group, tail
from convdb.infra.settings import Settings
from convdb.schemas.topics import ALL_TOPICS

FIGURES = {
    "scaleout_2p_events_per_s": ("consume all: 2 processes, one group, 4 partitions, SQLite", "events/s", ""),
    "scaleout_1p_events_per_s": ("consume all: 1 process, same topic and store, SQLite", "events/s", ""),
    "scaleout_pg_2p_events_per_s": ("consume all: 2 processes, PostgreSQL", "events/s", ""),
    "scaleout_pg_1p_events_per_s": ("consume all: 1 process, PostgreSQL", "events/s", ""),
}


def run(ctx: BenchContext) -> Figures:
    """Median combined events/s with one and with two processes, per store backend."""
    count = ctx.pick(100_000, 200_000)
    runs = min(ctx.repeats, 3)
    events = interleaved(count)
    pg_url = os.environ.get("CONVDB_BENCH_PG_URL", PG_DEFAULT)
    stores = [("", lambda s: f"sqlite:///{s.data_dir / 'store.db'}")]
    if _pg_reachable(pg_url, ctx):
        stores.append(("pg_", None))
    figures: Figures = {}
    for label, url_of in stores:
        for processes in (2, 1):
            rates = []
            for _ in range(runs):
                if url_of is None:
                    with pg_schema(pg_url) as url:
                        rates.append(_one(ctx, events, processes, lambda _s, url=url: url))
                else:
                    rates.append(_one(ctx, events, processes, url_of))
            figures[f"scaleout_{label}{processes}p_events_per_s"] = median(rates)
    ctx.notes.append(
        f"scale-out: {count:,} events over 100 conversations on 4 partitions, median of {runs} runs; "
        "`convdb consume all` "
        "(views, index, titles, stats, effects) child processes started and assigned before the "
        "events are produced; rate = events / (first produce -> last event applied)"
    )
    return figures


def _one(ctx: BenchContext, events: list[Any], processes: int, url_of: Any) -> float:
    settings = ctx.fresh("scaleout", ALL_TOPICS)
    settings = settings.model_copy(update={"store_url": url_of(settings), "partitions": 4})
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    children: list[tuple[Any, Path, int]] = []
    try:
        for i in range(processes):
            children.append(_start(settings, settings.data_dir / f"consume-{i}.log"))
        _wait(lambda: all(len(_assigned(log)) == 4 // processes for _, log, _ in children), children, 60)
        started = time.perf_counter()
        fill_topic(settings, events)
        _wait(
            lambda: sum(consumer_events_applied(port) for _, _, port in children) >= len(events),
            children,
            600,
        )
        return len(events) / (time.perf_counter() - started)
    finally:
        for proc, _, _ in children:
            stop_group(proc.pid)
        drop_namespace(settings)


def _start(settings: Settings, log: Path) -> tuple[Any, Path, int]:
    port = free_port()
    argv = [sys.executable, "-m", "convdb", "-v", "consume", "all", "--metrics-port", str(port)]
    return spawn(argv, log, settings.to_env()), log, port


def _wait(condition: Any, children: list[tuple[Any, Path, int]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for proc, log, _ in children:
            if proc.poll() is not None:
                raise BenchError(f"`convdb consume all` exited with {proc.returncode}:\n{tail(log)}")
        if time.monotonic() > deadline:
            raise BenchError(f"scale-out: not done in {timeout}s:\n{tail(children[0][1])}")
        time.sleep(0.01)


def _assigned(log: Path) -> set[int]:
    """Events-topic partitions of the child's last assignment (its log says)."""
    lines = [line for line in tail(log, 400).splitlines() if " assigned [(" in line]
    return {int(p) for p in re.findall(r"\('[^']*\.events', (\d+),", lines[-1])} if lines else set()
