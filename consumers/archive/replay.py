"""Replay: rebuild a projection in a (shadow) store from Kafka, the archive, or both.

Drives the projector through the same `Projector` contract and the same batch transaction
as the live runner (`convdb.consumers._apply`: `apply` plus the consumed offsets), decodes with the
same codec, and treats undecodable or rejected records as the runner does (they are skipped
here; the runner sends them to the DLQ): a full replay therefore equals the live projection,
and the shadow store can be promoted and resumed by the runner from its stored offsets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from convdb.consumers._apply import apply_batch
from convdb.consumers._gc import batch_done, batch_loop
from convdb.consumers._isolate import culprits, rolled_back, without
from convdb.consumers._pipeline import StorePipeline
from convdb.consumers._rows import key_of
from convdb.consumers.archive.container import RawRecord
from convdb.consumers.archive.errors import StoreUrlError
from convdb.consumers.archive.reader import ArchiveReader
from convdb.consumers.archive.sources import Segment, Source, Window, plan, read_segments
from convdb.consumers.base import Batch, ConsumedRecord, Projector
from convdb.consumers.errors import StoreError
from convdb.consumers.store import metadata, offsets, open_engine, projections, upsert
from convdb.infra.settings import Settings
from convdb.schemas import Codec, SingleObjectCodec
from convdb.schemas.errors import SchemaError
from convdb.schemas.topics import Topic

logger = logging.getLogger(__name__)

Progress = Callable[[int], None]
"""Told how many more offsets of the planned segments were covered (records, skipped records and
transaction markers alike), so that it reaches the planned total exactly when reading is done."""


@dataclass
class ReplayResult:
    """What a replay did."""

    consumer: str
    applied: int = 0
    undecodable: int = 0
    rejected: int = 0
    outside_window: int = 0
    seconds: float = 0.0
    segments: list[Segment] = field(default_factory=list)
    flowing_seconds: float = 0.0
    """From the first record read to the last one stored: `seconds` without the start-up (tables
    reset, readers connected and positioned) and the index build at the end."""

    @property
    def rate(self) -> float:
        """Records read per second (applied + skipped) while they flowed (all of `seconds` when
        that was not measured, e.g. several processes)."""
        total = self.applied + self.undecodable + self.rejected + self.outside_window
        seconds = self.flowing_seconds or self.seconds
        return total / seconds if seconds > 0 else 0.0


def open_store(url: str) -> Engine:
    """An engine for a shadow store's URL (`open_engine(rebuild=True)`) that has been connected to once.

    Raises:
        StoreUrlError: the URL is malformed, names an unsupported backend, or cannot be reached.
    """
    try:
        engine = open_engine(url, rebuild=True)
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except StoreError as exc:
        raise StoreUrlError(str(exc)) from exc
    except SQLAlchemyError as exc:
        raise StoreUrlError(
            f"cannot open store {url!r}: {exc.__class__.__name__}: {getattr(exc, 'orig', None) or exc}"
        ) from exc
    return engine


def plan_replay(
    settings: Settings, projector: Projector, window: Window, source: Source, reader: ArchiveReader | None
) -> dict[str, list[Segment]]:
    """Segments per topic of the projector; raises `OffsetRangeError` before anything is written."""
    return {t.name(settings.namespace): plan(settings, reader, t.name(settings.namespace), window, source)
            for t in projector.topics}  # fmt: skip


def replay(
    settings: Settings,
    projector: Projector,
    engine: Engine,
    segments: dict[str, list[Segment]],
    window: Window,
    codec: Codec,
    reader: ArchiveReader | None = None,
    progress: Progress | None = None,
    batch_size: int = 5000,
) -> ReplayResult:
    """Drop and re-create the projector's tables in `engine`, then fold every planned record.

    Indexes that enforce nothing (not unique) are built once at the end, from the loaded rows,
    instead of being updated row by row.
    """
    started = time.monotonic()
    with engine.begin() as conn:
        deferred = reset(conn, projector)
    result = load(settings, projector, engine, segments, window, codec, reader, progress, batch_size)
    build_indexes(engine, deferred)
    result.seconds = time.monotonic() - started
    return result


def load(
    settings: Settings,
    projector: Projector,
    engine: Engine,
    segments: dict[str, list[Segment]],
    window: Window,
    codec: Codec,
    reader: ArchiveReader | None = None,
    progress: Progress | None = None,
    batch_size: int = 5000,
) -> ReplayResult:
    """Fold every planned record into tables `reset` prepared (several loads may share them).

    As in the live runner, each batch is written by a store thread while the next one is read
    and decoded.
    """
    result = ReplayResult(projector.name, segments=[s for segs in segments.values() for s in segs])
    started = time.monotonic()
    flowing: float | None = None  # when the first record arrived
    topics = {t.name(settings.namespace): t for t in projector.topics}
    pipeline: StorePipeline[list[ConsumedRecord], None] = StorePipeline(
        lambda batch: _apply(engine, projector, settings.namespace, batch, result),
        "convdb-replay-store",
        after=batch_done,
    )
    try:
        with batch_loop():  # as the live runner: collection paced by batches
            for topic, segs in segments.items():
                covered = _Coverage(segs)
                raw = covered.track(read_segments(settings, reader, segs, window))
                done = False
                while not done:
                    batch, done = _next_batch(raw, topics[topic], codec, window, result, batch_size)
                    if batch and flowing is None:
                        flowing = time.monotonic()
                    if batch:
                        pipeline.submit(batch)
                    del batch
                    pipeline.finished()  # raises the store thread's error, if any
                    if progress is not None:
                        progress(covered.advance(finished=done))
            pipeline.drain()
    finally:
        pipeline.close()
    result.seconds = time.monotonic() - started
    result.flowing_seconds = time.monotonic() - flowing if flowing is not None else 0.0
    return result


def reset(conn: Connection, projector: Projector) -> list[sa.Index]:
    """Drop and re-create the projector's tables, forget its offsets, and drop the indexes to
    build after loading (`drop_secondary_indexes`); returns those."""
    _reset(conn, projector)
    return drop_secondary_indexes(conn, projector)


def build_indexes(engine: Engine, indexes: list[sa.Index]) -> None:
    """Create the indexes a `reset` dropped, from the loaded rows."""
    with engine.begin() as conn:
        for index in indexes:
            index.create(conn)


def drop_secondary_indexes(conn: Connection, projector: Projector) -> list[sa.Index]:
    """Drop the non-unique indexes of the projector's declared tables (`metadata`); returns them.

    A projector without declared tables keeps its indexes. A replay that dies before building
    them again leaves a shadow store without them: run it again (it starts by dropping).
    """
    metadata = getattr(projector, "metadata", None)
    if not isinstance(metadata, sa.MetaData):
        return []
    indexes = [i for t in metadata.sorted_tables for i in sorted(t.indexes, key=lambda i: str(i.name))]
    deferred = [i for i in indexes if not i.unique]
    for index in deferred:
        index.drop(conn)
    return deferred


class _Coverage:
    """Offsets of the planned segments read so far: what the progress bar counts."""

    def __init__(self, segments: list[Segment]) -> None:
        self.start = {(s.topic, s.partition): s.start for s in reversed(segments)}
        self.total = sum(s.stop - s.start for s in segments)
        self.position = dict(self.start)
        self.reported = 0

    def track(self, raw: Iterator[RawRecord]) -> Iterator[RawRecord]:
        """Pass records through, remembering the next offset of each partition."""
        for rec in raw:
            self.position[(rec.topic, rec.partition)] = rec.offset + 1
            yield rec

    def advance(self, *, finished: bool) -> int:
        """Offsets covered since the last call; every planned offset once reading is finished."""
        covered = self.total if finished else sum(self.position[k] - self.start[k] for k in self.start)
        step, self.reported = max(covered - self.reported, 0), max(covered, self.reported)
        return step


def _next_batch(
    raw: Iterator[RawRecord], topic: Topic, codec: Codec, window: Window, result: ReplayResult, size: int
) -> tuple[list[ConsumedRecord], bool]:
    """Up to `size` decoded records, and whether `raw` is exhausted."""
    batch: list[ConsumedRecord] = []
    for rec in raw:
        decoded = _decode(rec, topic, codec, window, result)
        if decoded is not None:
            batch.append(decoded)
            if len(batch) >= size:
                return batch, False
    return batch, True


def _reset(conn: Connection, projector: Projector) -> None:
    metadata.create_all(conn)
    projector.drop(conn)
    projector.create(conn)
    conn.execute(offsets.delete().where(offsets.c.consumer == projector.name))
    upsert(conn, projections, [{"name": projector.name, "version": projector.version}], ["name"])


def _decode(
    rec: RawRecord, topic: Topic, codec: Codec, window: Window, result: ReplayResult
) -> ConsumedRecord | None:
    try:
        if rec.value is None:
            raise SchemaError("null value (a tombstone) where a record was expected")
        value = codec.decode(rec.value, expect=topic.value_types)
        key = key_of(rec.key, value.conversation_id)
    except Exception as exc:  # noqa: BLE001 - as the live runner: any decoding error is the record's
        logger.warning("%s[%d]@%d: undecodable, skipped: %s", rec.topic, rec.partition, rec.offset, exc)
        result.undecodable += 1
        return None
    stamp = getattr(value, "timestamp", None)
    if stamp is not None and not window.keeps(stamp):
        result.outside_window += 1
        return None
    data = rec.value if isinstance(codec, SingleObjectCodec) else None
    return ConsumedRecord(rec.topic, rec.partition, rec.offset, rec.timestamp_ms, key, value, data)


def _apply(
    engine: Engine, projector: Projector, namespace: str, batch: list[ConsumedRecord], result: ReplayResult
) -> None:
    ends = _ends(batch)
    while True:
        try:
            with engine.begin() as conn:
                # The live runner's transaction: refused records are left out (it dead-letters them).
                applied, rejected = apply_batch(conn, [projector], namespace, Batch(batch), ends)
            break
        except Exception as exc:
            # As the live runner (`convdb.consumers._commit`): the records the store refuses are left out.
            found = culprits(exc, batch, rolled_back(engine, [projector], namespace, ends))
            if not found:
                raise
            for record, error in found:
                logger.warning("%s[%d]@%d: the store refuses it, skipped: %s", *_where(record), error)
            batch = without(batch, found)
            result.rejected += len(found)
    result.rejected += len(rejected)
    result.applied += applied


def _where(record: ConsumedRecord) -> tuple[str, int, int]:
    return record.topic, record.partition, record.offset


def _ends(batch: list[ConsumedRecord]) -> dict[tuple[str, int], int]:
    ends: dict[tuple[str, int], int] = {}
    for r in batch:
        key = (r.topic, r.partition)
        ends[key] = max(ends.get(key, 0), r.offset + 1)
    return ends
