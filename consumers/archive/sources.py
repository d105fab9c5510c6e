"""Where replay and export read from: Kafka, the archive, or the archive with a Kafka tail.

The end of a Kafka partition is the high watermark the *fetch* reports, never ListOffsets
(wrong on the embedded broker for multi-record batches, INFRA-NOTES §1.5). Ranges are half
open: `[start, stop)`.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from confluent_kafka import KafkaError, TopicPartition

from convdb.consumers.archive.container import RawRecord
from convdb.consumers.archive.errors import OffsetRangeError
from convdb.consumers.archive.reader import ArchiveReader
from convdb.consumers.archive.service import raw_record
from convdb.infra.errors import InfraError
from convdb.infra.reader import partition_extents, reader_consumer
from convdb.infra.records import coordinates
from convdb.infra.settings import Settings

Source = Literal["kafka", "archive", "auto"]


@dataclass(frozen=True)
class Window:
    """What to read: offsets [from_offset, to_offset) of each partition, event times [from_time, to_time)."""

    from_offset: int | None = None
    to_offset: int | None = None
    from_time: datetime | None = None
    to_time: datetime | None = None

    def keeps(self, event_time: datetime) -> bool:
        """True when an event's own timestamp lies in the time window."""
        if self.from_time is not None and event_time < self.from_time:
            return False
        return self.to_time is None or event_time < self.to_time

    @property
    def from_ms(self) -> int | None:
        """The window's start in epoch milliseconds (rounded down), if any."""
        return None if self.from_time is None else int(self.from_time.timestamp() * 1000)


@dataclass(frozen=True)
class Segment:
    """Offsets [start, stop) of one partition, read from one source."""

    topic: str
    partition: int
    source: Literal["kafka", "archive"]
    start: int
    stop: int


def plan(
    settings: Settings, reader: ArchiveReader | None, topic: str, window: Window, source: Source
) -> list[Segment]:
    """The segments to read for a window, per partition.

    Raises:
        OffsetRangeError: the start is gone from Kafka (and not archived), lies past every
            partition's end, or the archive and Kafka leave a gap.
    """
    kafka = partition_extents(settings, topic) if source != "archive" else {}
    archived: dict[int, tuple[int, int] | None] = {}
    if source != "kafka":
        if reader is None:
            raise OffsetRangeError("this replay needs the archive, but no archive is configured")
        parts = set(kafka) | set(reader.partitions(topic))
        archived = {p: reader.extent(topic, p) for p in sorted(parts)}
        if source == "archive" and not any(archived.values()):
            raise OffsetRangeError(f"the archive holds nothing of {topic} (is the archive consumer running?)")
    segments: list[Segment] = []
    for p in sorted(set(kafka) | set(archived)):
        segments += _partition_plan(topic, p, window, source, kafka.get(p), archived.get(p))
    ends = {p: e[1] for p, e in kafka.items()} | {p: a[1] + 1 for p, a in archived.items() if a}
    # At the end (an empty topic from offset 0 included) means "nothing to read", not an error.
    if (
        window.from_offset is not None
        and not segments
        and ends
        and all(window.from_offset > e for e in ends.values())
    ):
        raise OffsetRangeError(
            f"offset {window.from_offset} is past the end of every partition of {topic} (ends: {ends})"
        )
    return segments


def _partition_plan(
    topic: str,
    p: int,
    window: Window,
    source: Source,
    kafka: tuple[int, int] | None,
    archived: tuple[int, int] | None,
) -> list[Segment]:
    stop_cap = window.to_offset
    wanted = window.from_offset
    where = f"{topic}[{p}]"
    if source == "kafka" or (source == "auto" and not archived):
        low, high = kafka or (0, 0)
        start = low if wanted is None else wanted
        if start < low:
            hint = "" if source == "auto" else "; replay with --source archive or --source auto"
            raise OffsetRangeError(f"{where}: offset {start} is gone from Kafka (first offset {low}){hint}")
        return _segments(topic, p, "kafka", start, _cap(high, stop_cap))
    a0, a1 = archived or (0, -1)
    start = a0 if wanted is None else wanted
    if source == "archive":
        if archived and start < a0:
            raise OffsetRangeError(f"{where}: offset {start} is not archived (the archive starts at {a0})")
        return _segments(topic, p, "archive", start, _cap(a1 + 1, stop_cap))
    low, high = kafka or (a1 + 1, a1 + 1)
    if start < a0:
        if start < low:
            raise OffsetRangeError(
                f"{where}: offset {start} is neither archived (from {a0}) nor in Kafka (from {low})"
            )
        return _segments(topic, p, "kafka", start, _cap(high, stop_cap))
    if a1 + 1 < low:
        raise OffsetRangeError(f"{where}: offsets {a1 + 1}..{low - 1} are neither archived nor in Kafka")
    segs = _segments(topic, p, "archive", start, _cap(a1 + 1, stop_cap))
    return segs + _segments(topic, p, "kafka", max(start, a1 + 1), _cap(high, stop_cap))


def _cap(end: int, stop: int | None) -> int:
    return end if stop is None else min(end, stop)


def _segments(
    topic: str, p: int, source: Literal["kafka", "archive"], start: int, stop: int
) -> list[Segment]:
    return [Segment(topic, p, source, start, stop)] if start < stop else []


def read_segments(
    settings: Settings, reader: ArchiveReader | None, segments: list[Segment], window: Window
) -> Iterator[RawRecord]:
    """Raw records of the segments: per partition in offset order (archive part, then Kafka tail)."""
    for seg in segments:
        if seg.source == "archive" and reader is not None:
            refs = reader.objects(seg.topic, seg.partition, seg.start)
            refs = [r for r in refs if r.start < seg.stop]
            if window.from_ms is not None:
                from_ms = window.from_ms
                refs = [
                    r for r, i in zip(refs, reader.indexes(refs), strict=True) if i.may_hold_from(from_ms)
                ]
            yield from reader.read(refs, seg.start, seg.stop)
    kafka = [s for s in segments if s.source == "kafka"]
    if kafka:
        yield from read_kafka(settings, kafka, window)


def read_kafka(settings: Settings, segments: list[Segment], window: Window) -> Iterator[RawRecord]:
    """Records of Kafka segments; a time window starts each partition at `offsets_for_times`.

    Read without partition-EOF events (measured 15x faster on the embedded broker) until
    every partition has delivered its last planned offset; a partition whose planned range
    ends in transaction markers never does, so what is left once reading goes idle is read
    again with EOF events, which say where it ends.
    """
    starts = {(s.topic, s.partition): s.start for s in segments}
    stops = {(s.topic, s.partition): s.stop for s in segments}
    if window.from_ms is not None:
        consumer = reader_consumer(settings, "replay", **{"auto.offset.reset": "error"})
        try:
            query = [TopicPartition(t, p, window.from_ms) for t, p in starts]
            for tp in consumer.offsets_for_times(query, 10.0):
                key = (tp.topic, tp.partition)
                # -1: nothing at or after that time; Kafka's first such offset otherwise.
                starts[key] = stops[key] if tp.offset < 0 else max(starts[key], tp.offset)
        finally:
            consumer.close()
    todo = {k: starts[k] for k in starts if starts[k] < stops[k]}
    todo = yield from _read_kafka(settings, todo, stops, eof=False)
    if todo:
        yield from _read_kafka(settings, todo, stops, eof=True)


def _read_kafka(
    settings: Settings, starts: dict[tuple[str, int], int], stops: dict[tuple[str, int], int], eof: bool
) -> Generator[RawRecord, None, dict[tuple[str, int], int]]:
    """Records of [start, stop) per partition; returns the next offset of those not finished.

    Without `eof`, it returns once idle (a poll with nothing); with it, at each partition's end.
    """
    overrides: dict[str, Any] = {"auto.offset.reset": "error", "enable.partition.eof": eof}
    consumer = reader_consumer(settings, "replay", **overrides)
    todo, position = set(starts), dict(starts)
    try:
        consumer.assign([TopicPartition(t, p, starts[(t, p)]) for t, p in sorted(todo)])
        while todo:
            messages = consumer.consume(1000, 1.0)
            if not messages and not eof:
                break
            for msg in messages:
                key, err = (msg.topic(), msg.partition()), msg.error()
                if key not in todo:
                    continue
                if err is not None:
                    _check(err, key, starts[key])
                    if err.code() == KafkaError._PARTITION_EOF:
                        todo.discard(key)
                    continue
                _, _, offset = coordinates(msg)
                position[key] = offset + 1
                if offset < stops[key]:
                    yield raw_record(msg)
                if offset >= stops[key] - 1:
                    todo.discard(key)
    finally:
        consumer.close()
    return {key: position[key] for key in todo}


def _check(err: KafkaError, key: tuple[str, int], start: int) -> None:
    if err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
        raise OffsetRangeError(f"{key[0]}[{key[1]}]: offset {start} is out of range in Kafka")
    if err.code() != KafkaError._PARTITION_EOF and not err.retriable():
        raise InfraError(f"reading {key[0]}[{key[1]}]: {err.str()}")
