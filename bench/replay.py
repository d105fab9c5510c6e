"""Replay: rebuild the read side (views + index + stats) of N events from Kafka and from the archive.

The archive is filled by the real archive consumer (`convdb.consumers.archive.ArchiveConsumer`, a
`file://` target: the object layout and Avro container files of S3, without a server's cost).
Each rebuild plans and runs `convdb.consumers.archive.replay` into a fresh SQLite store, with the three
projectors hosted as one (one decode and one transaction per batch, as `convdb consume all`
runs them), in one process and with the partitions spread over one worker process per core
(`convdb.consumers.archive.parallel`, as `convdb replay --processes N`). Timed from the plan to the
last commit (deferred indexes built, worker start included). All rebuilds of a run must agree
digest for digest. Each source's ceiling is measured in the same run: one process reading every
planned record from it as the replay does (`read_segments`) and decoding it with raw fastavro,
nothing else; the parallel rebuild's rate is compared with it.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.common import BenchContext, BenchError, Figures, drop_namespace, median
from bench.sink import interleaved, present_projectors, raw_decoder
from bench.sinkrun import fill_topic
from convdb.consumers.archive import ArchiveConsumer
from convdb.consumers.archive.parallel import replay_parallel
from convdb.consumers.archive.reader import ArchiveReader
from convdb.consumers.archive.replay import open_store, plan_replay, replay
from convdb.consumers.archive.sources import Source, Window, read_segments
from convdb.consumers.archive.target import open_target
from convdb.consumers.base import Batch, ConsumedRecord, Projector, Rejection
from convdb.consumers.plugins import load
from convdb.infra.settings import Settings
from convdb.schemas import make_codec
from convdb.schemas.topics import EVENTS, Topic

PROCESSES = max(2, os.cpu_count() or 2)
"""Worker processes of the parallel rebuild: one per core."""

FIGURES = {
    "replay_kafka_events_per_s": (
        f"replay: rebuild views+index+stats from Kafka, {PROCESSES} processes",
        "events/s",
        "",
    ),
    "replay_archive_events_per_s": (
        f"replay: rebuild views+index+stats from the archive, {PROCESSES} processes",
        "events/s",
        "",
    ),
    "replay_kafka_1p_events_per_s": ("replay from Kafka, one process (context)", "events/s", ""),
    "replay_archive_1p_events_per_s": ("replay from the archive, one process (context)", "events/s", ""),
    "replay_kafka_ceiling_per_s": (
        "read from Kafka + raw fastavro decode, one process (ceiling)",
        "events/s",
        "",
    ),
    "replay_archive_ceiling_per_s": (
        "read from the archive + raw fastavro decode, one process (ceiling)",
        "events/s",
        "",
    ),
    "replay_kafka_ratio": (f"replay from Kafka, {PROCESSES} processes / its ceiling", "ratio", ">= 0.45"),
    "replay_archive_ratio": (
        f"replay from the archive, {PROCESSES} processes / its ceiling",
        "ratio",
        ">= 0.75",
    ),
}


class ReadSide:
    """Several projectors replayed as one: each record decoded once, one transaction per batch."""

    name = "readside"
    version = 1

    def __init__(self, parts: Sequence[Projector]) -> None:
        self.parts = list(parts)
        topics: list[Topic] = []
        for part in self.parts:
            topics += [t for t in part.topics if t not in topics]
        self.topics = tuple(topics)
        self.metadata = sa.MetaData()
        """Every part's declared tables (a replay builds their secondary indexes after loading)."""
        for part in self.parts:
            for table in getattr(part, "metadata", sa.MetaData()).sorted_tables:
                table.to_metadata(self.metadata)

    def create(self, connection: Any) -> None:
        """Create every part's tables."""
        for part in self.parts:
            part.create(connection)

    def drop(self, connection: Any) -> None:
        """Drop every part's tables."""
        for part in self.parts:
            part.drop(connection)

    def apply(self, connection: Any, records: Sequence[ConsumedRecord]) -> list[Rejection]:
        """Fold the batch into every part, in the caller's transaction; returns what they refused."""
        batch = Batch.of(records)
        return [r for part in self.parts for r in part.apply(connection, batch)]

    def digests(self, connection: Any) -> dict[str, str]:
        """Every part's per-conversation digests, keyed 'part:conversation'."""
        return {f"{p.name}:{k}": v for p in self.parts for k, v in p.digests(connection).items()}

    def after_commit(self, engine: Any, caught_up: set[tuple[str, int]]) -> None:
        """Nothing: a replay makes no effects."""


def read_side(names: Sequence[str], settings: Settings) -> ReadSide:
    """The projectors called `names` hosted as one (picklable through `functools.partial`)."""
    return ReadSide([load(n, settings) for n in names])


def run(ctx: BenchContext) -> Figures:
    """Median events/s of a full rebuild from each source, one process and parallel."""
    count = ctx.pick(100_000, 1_000_000)
    settings = ctx.fresh("replay", (EVENTS,))
    settings = settings.model_copy(
        update={
            "archive_url": f"file://{(settings.data_dir / 'archive').resolve()}",
            "archive": settings.archive.model_copy(
                update={"topics": ("events",), "max_records": 5000, "max_age_s": 1.0}
            ),
        }
    )
    cases = [(source, p) for p in (PROCESSES, 1) for source in ("kafka", "archive")]
    runs = 1 if ctx.large else ctx.repeats  # 4 rebuilds of 1M events per run: one run at that size
    rates: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
    plans: dict[str, list[float]] = {"kafka": [], "archive": []}
    ceilings: dict[str, list[float]] = {"kafka": [], "archive": []}
    try:
        fill_topic(settings, interleaved(count))
        fill_archive(settings, count, timeout=max(120.0, count / 1000))
        make = functools.partial(read_side, present_projectors(ctx), settings)
        target, prefix = open_target(settings)
        reader = ArchiveReader(target, prefix)
        for i in range(runs):
            for source in ceilings:
                ceilings[source].append(read_rate(settings, make(), source, reader, count))
            digests: list[dict[str, str]] = []
            for source, processes in cases:
                url = f"sqlite:///{settings.data_dir / f'replay-{source}-{processes}-{i}.db'}"
                seconds, planned, digest = rebuild(settings, make, url, source, reader, count, processes)
                rates[(source, processes)].append(count / seconds)
                plans[source].append(planned * 1000)
                digests.append(digest)
                Path(url.removeprefix("sqlite:///")).unlink()
            if any(d != digests[0] for d in digests):
                raise BenchError("replay: the rebuilds (Kafka, archive, one or more processes) differ")
        reader.close()
    finally:
        drop_namespace(settings)
    ctx.notes.append(
        f"replay: {count:,} events over 100 conversations on {settings.partitions} partitions into a "
        f"fresh SQLite store per run ({runs} run(s)), one process and {PROCESSES} worker processes; "
        "of each rebuild, "
        f"planning took {median(plans['kafka']):.0f} ms (Kafka: fetch-reported ends) and "
        f"{median(plans['archive']):.0f} ms (archive listing)"
    )
    ratio = {
        source: median([r / c for r, c in zip(rates[(source, PROCESSES)], ceilings[source], strict=True)])
        for source in ceilings
    }
    return {
        "replay_kafka_events_per_s": median(rates[("kafka", PROCESSES)]),
        "replay_archive_events_per_s": median(rates[("archive", PROCESSES)]),
        "replay_kafka_1p_events_per_s": median(rates[("kafka", 1)]),
        "replay_archive_1p_events_per_s": median(rates[("archive", 1)]),
        "replay_kafka_ceiling_per_s": median(ceilings["kafka"]),
        "replay_archive_ceiling_per_s": median(ceilings["archive"]),
        "replay_kafka_ratio": ratio["kafka"],
        "replay_archive_ratio": ratio["archive"],
    }


def read_rate(
    settings: Settings, projector: ReadSide, source: Source, reader: ArchiveReader, count: int
) -> float:
    """Records/s of one process reading every planned record from `source` and raw-decoding it."""
    window = Window(from_offset=0)
    decode = raw_decoder()
    started = time.perf_counter()
    segments = plan_replay(settings, projector, window, source, reader if source == "archive" else None)
    seen = 0
    for segs in segments.values():
        for record in read_segments(settings, reader, segs, window):
            decode(record.value)
            seen += 1
    if seen != count:
        raise BenchError(f"read {seen} of {count} records from {source}")
    return count / (time.perf_counter() - started)


def fill_archive(settings: Settings, count: int, timeout: float = 120.0) -> None:
    """Run the archive consumer until it has stored `count` records of the events topic."""
    archive = ArchiveConsumer(settings)
    stop = threading.Event()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            archive.run(stop)
        except Exception as exc:  # noqa: BLE001 - re-raised in the bench thread below
            errors.append(exc)

    thread = threading.Thread(target=work, name="bench-archive", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    try:
        while archive.records_archived < count and not errors:
            if time.monotonic() > deadline:
                raise BenchError(
                    f"archive stored {archive.records_archived} of {count} records in {timeout}s"
                )
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(60)
    if errors:
        raise BenchError(f"archive consumer failed: {errors[0]}") from errors[0]


def rebuild(
    settings: Settings,
    make: Callable[[], ReadSide],
    url: str,
    source: Source,
    reader: ArchiveReader,
    count: int,
    processes: int,
) -> tuple[float, float, dict[str, str]]:
    """Seconds of one rebuild (plan + replay) into a fresh store, of its plan, and the store's digests."""
    projector = make()
    window = Window(from_offset=0)
    started = time.perf_counter()
    segments = plan_replay(settings, projector, window, source, reader if source == "archive" else None)
    planned = time.perf_counter() - started
    if processes > 1:
        result = replay_parallel(settings, make, url, segments, window, processes)
    else:
        engine = open_store(url)
        codec = make_codec(settings.schema_registry_url)
        result = replay(settings, projector, engine, segments, window, codec, reader)
        engine.dispose()
    seconds = time.perf_counter() - started
    if result.applied != count or result.undecodable or result.rejected:
        raise BenchError(
            f"replay from {source} ({processes} processes): applied {result.applied} of {count} "
            f"(undecodable {result.undecodable}, rejected {result.rejected})"
        )
    engine = open_store(url)
    with engine.connect() as conn:
        digests = projector.digests(conn)
    engine.dispose()
    return seconds, planned, digests
