"""Replay with partitions spread over worker processes: one store, several loaders.

Conversations are keyed to partitions, so workers that own disjoint partitions write disjoint
rows (and their own offset rows); each runs the same pipelined `load` as a single-process
replay. The parent resets the tables first and builds the deferred indexes last. On SQLite
the workers' write transactions take turns on the store's writer lock file
(`convdb.consumers._turns`: woken as soon as the other commits; the decoding and folding between
them is what runs in parallel); on PostgreSQL they write at once.

Workers come from a fork server that has imported convdb already, so starting one costs
tens of milliseconds, not the imports' second.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from multiprocessing import forkserver
from typing import Any

from convdb.consumers.archive.replay import (
    Progress,
    ReplayResult,
    build_indexes,
    load,
    open_store,
    reset,
)
from convdb.consumers.archive.sources import Segment, Window
from convdb.consumers.base import Projector
from convdb.infra.settings import Settings

PRELOAD = [
    "convdb.consumers.archive.parallel",
    "convdb.consumers.plugins",
    "sqlalchemy.dialects.sqlite",
    "psycopg",
]
"""Modules the fork server imports once, before forking any worker."""

_progress: Any = None
"""The worker's shared counter of offsets read (set by `_init`)."""


def shards(segments: dict[str, list[Segment]], processes: int) -> list[dict[str, list[Segment]]]:
    """The segments split by partition into at most `processes` shards (each partition in one),
    balanced by offsets to read: the largest partition first, each to the shard with the fewest.

    The rebuild lasts as long as its largest shard: with 100 conversations on 4 partitions, taking
    every other partition gave shards of 43k and 57k of 100k events (measured).
    """
    sizes: dict[int, int] = {}
    for segs in segments.values():
        for s in segs:
            sizes[s.partition] = sizes.get(s.partition, 0) + s.stop - s.start
    count = min(processes, len(sizes)) or 1
    owned: list[set[int]] = [set() for _ in range(count)]
    loads = [0] * count
    for partition in sorted(sizes, key=lambda p: (-sizes[p], p)):
        least = loads.index(min(loads))
        owned[least].add(partition)
        loads[least] += sizes[partition]
    return [{t: [s for s in segs if s.partition in mine] for t, segs in segments.items()} for mine in owned]


def replay_parallel(
    settings: Settings,
    make_projector: Callable[[], Projector],
    url: str,
    segments: dict[str, list[Segment]],
    window: Window,
    processes: int,
    progress: Progress | None = None,
    batch_size: int = 5000,
) -> ReplayResult:
    """Rebuild the projector `make_projector` builds (a picklable callable) in the store at `url`."""
    started = time.monotonic()
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    # The fork server imports convdb (about a second) while the tables are reset here.
    forkserver.ensure_running()
    projector = make_projector()
    engine = open_store(url)
    with engine.begin() as conn:
        deferred = reset(conn, projector)
    counter = context.Value("q", 0)
    parts = shards(segments, processes)
    with ProcessPoolExecutor(len(parts), mp_context=context, initializer=_init, initargs=(counter,)) as pool:
        futures = [
            pool.submit(_load, settings, make_projector, url, part, window, batch_size) for part in parts
        ]
        results = _wait(futures, counter, progress)
    build_indexes(engine, deferred)
    engine.dispose()
    merged = ReplayResult(projector.name, segments=[s for segs in segments.values() for s in segs])
    for r in results:
        merged.applied += r.applied
        merged.undecodable += r.undecodable
        merged.rejected += r.rejected
        merged.outside_window += r.outside_window
    merged.seconds = time.monotonic() - started
    return merged


def _wait(futures: list[Future[ReplayResult]], counter: Any, progress: Progress | None) -> list[ReplayResult]:
    reported = 0
    while True:
        done, pending = wait(futures, timeout=0.2, return_when=FIRST_EXCEPTION)
        if progress is not None and counter.value > reported:
            progress(counter.value - reported)
            reported = counter.value
        if not pending or any(f.exception() is not None for f in done):
            break
    return [f.result() for f in futures]  # raises the first worker's error


def _init(counter: Any) -> None:
    global _progress
    _progress = counter


def _advance(n: int) -> None:
    with _progress.get_lock():
        _progress.value += n


def _load(
    settings: Settings,
    make_projector: Callable[[], Projector],
    url: str,
    segments: dict[str, list[Segment]],
    window: Window,
    batch_size: int,
) -> ReplayResult:
    from convdb.consumers.archive.reader import ArchiveReader
    from convdb.consumers.archive.target import open_target
    from convdb.schemas import make_codec

    reader = None
    if any(s.source == "archive" for segs in segments.values() for s in segs):
        target, prefix = open_target(settings)
        reader = ArchiveReader(target, prefix)
    engine = open_store(url)
    try:
        codec = make_codec(settings.schema_registry_url)
        return load(settings, make_projector(), engine, segments, window, codec, reader, _advance, batch_size)
    finally:
        engine.dispose()
        if reader is not None:
            reader.close()
