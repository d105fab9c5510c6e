"""The archive sink (quix `sinks/base/sink.py` shape): `setup()`, `add()` buffers per partition,
`flush()` writes one object. The caller commits Kafka offsets only after `flush()` returned.

Rotation is deterministic so that a crash between upload and commit re-uploads the *same* key
with the same bytes:
- by record count and by value bytes, counted from the batch's first offset: re-reading from
  the committed offset reproduces the same boundaries;
- by age (wall clock) it is not deterministic by itself, so before a partition's first batch
  the sink lists the objects already stored at or after its start offset (at most one per
  partition: the one uploaded but not committed before a crash) and *adopts* their boundaries:
  the batch closes exactly at that object's end. The stored key is the durable record of the
  rotation decision, and the re-upload overwrites it with identical bytes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from convdb.consumers.archive import layout
from convdb.consumers.archive.container import RawRecord, write_container
from convdb.consumers.archive.errors import ArchiveError
from convdb.consumers.archive.index import ObjectIndex
from convdb.consumers.archive.target import ArchiveTarget
from convdb.infra.retry import Backoff
from convdb.infra.settings import ArchiveSettings

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
T = TypeVar("T")


@dataclass
class _Batch:
    opened: float
    planned_end: int | None
    records: list[RawRecord] = field(default_factory=list)
    value_bytes: int = 0


@dataclass(frozen=True)
class StoredObject:
    """An object the sink stored: its key and index; commit `next_offset` after it."""

    key: str
    index: ObjectIndex
    size: int = 0
    """Bytes of the object (the container file, without its sidecar index)."""

    @property
    def next_offset(self) -> int:
        """The Kafka offset to commit once this object is stored."""
        return self.index.end + 1


class ArchiveSink:
    """Buffers records per topic-partition and writes them as deterministic archive objects."""

    def __init__(
        self,
        target: ArchiveTarget,
        prefix: str,
        settings: ArchiveSettings,
        clock: Callable[[], float] = time.monotonic,
        put_deadline_s: float = 60.0,
        report: Callable[[str | None], None] | None = None,
    ) -> None:
        self.target = target
        self.prefix = prefix
        self.settings = settings
        self.clock = clock
        self.put_deadline_s = put_deadline_s
        self.report = report or (lambda _problem: None)
        """Told why a put is being retried (shown on /healthz), and None once one succeeds."""
        self._batches: dict[TopicPartition, _Batch] = {}
        self._plans: dict[TopicPartition, dict[int, int]] = {}

    def setup(self) -> None:
        """Check that the target answers (fails fast on a bad URL or credentials)."""
        next(iter(self.target.list(self.prefix)), None)

    def add(self, record: RawRecord) -> bool:
        """Buffer a record; True when its partition's batch must be flushed now."""
        tp = (record.topic, record.partition)
        batch = self._batches.get(tp)
        if batch is None:
            batch = self._batches[tp] = _Batch(self.clock(), self._planned_end(tp, record.offset))
        batch.records.append(record)
        batch.value_bytes += len(record.value or b"")
        if batch.planned_end is not None:
            if record.offset > batch.planned_end:
                logger.error(
                    "%s[%d]@%d passed the stored object's end %d: boundaries differ from the stored one",
                    *tp, record.offset, batch.planned_end,
                )  # fmt: skip
            return record.offset >= batch.planned_end
        return len(batch.records) >= self.settings.max_records or batch.value_bytes >= self.settings.max_bytes

    def due(self) -> list[TopicPartition]:
        """Partitions whose batch is older than `max_age_s` (and not bound to a stored object)."""
        now = self.clock()
        return [
            tp
            for tp, b in self._batches.items()
            if b.records and b.planned_end is None and now - b.opened >= self.settings.max_age_s
        ]

    def pending(self) -> list[TopicPartition]:
        """Partitions with buffered records."""
        return [tp for tp, b in self._batches.items() if b.records]

    def flush(self, tp: TopicPartition) -> StoredObject:
        """Write the partition's batch (object, then sidecar index) and forget it.

        Raises:
            ArchiveError: the target kept failing for `put_deadline_s`.
        """
        batch = self._batches.pop(tp)
        index = ObjectIndex.build(batch.records)
        key = layout.object_key(self.prefix, tp[0], tp[1], index.start, index.end)
        meta = {"convdb.topic": tp[0], "convdb.partition": str(tp[1])}
        data = write_container(key, batch.records, meta)
        self._put(key, data, index.metadata())
        self._put(layout.index_key(key), index.to_json(), {})
        plan = self._plans.get(tp)
        if plan:
            for start in [s for s in plan if s <= index.end]:
                del plan[start]
        return StoredObject(key, index, len(data))

    def revoke(self, tp: TopicPartition) -> None:
        """Drop a partition's buffer and plan (another member now owns it)."""
        self._batches.pop(tp, None)
        self._plans.pop(tp, None)

    def _planned_end(self, tp: TopicPartition, offset: int) -> int | None:
        plan = self._plans.get(tp)
        if plan is None:
            plan = self._plans[tp] = self._stored_from(tp, offset)
            if plan:
                logger.info("%s[%d]: adopting %d stored object(s) from offset %d", *tp, len(plan), offset)
        end = plan.get(offset)
        if end is None and any(s > offset for s in plan):
            logger.warning("%s[%d]@%d: stored objects start later; boundaries may differ", *tp, offset)
        return end

    def _stored_from(self, tp: TopicPartition, offset: int) -> dict[int, int]:
        folder = layout.partition_prefix(self.prefix, *tp)
        after = layout.start_after(self.prefix, tp[0], tp[1], offset)
        keys = self._retried(f"list of {folder}", lambda: list(self.target.list(folder, after)))
        plan = {}
        for key in keys:
            ref = layout.parse_object_key(self.prefix, tp[0], tp[1], key)
            if ref is not None:
                plan[ref.start] = ref.end
        return plan

    def _put(self, key: str, data: bytes, metadata: dict[str, str]) -> None:
        self._retried(f"put of {key}", lambda: self.target.put(key, data, metadata))

    def _retried(self, what: str, call: Callable[[], T]) -> T:
        """`call()`, retried with backoff for `put_deadline_s` while the target fails (on /healthz)."""
        backoff = Backoff(self.put_deadline_s, first_s=0.2, clock=self.clock)
        while True:
            try:
                result = call()
            except ArchiveError as exc:
                wait = backoff.failed()
                if wait is None:
                    raise
                self.report(f"{what} failing, retried for up to {self.put_deadline_s:.0f}s: {exc}")
                logger.warning("archive %s failed, retrying in %.1fs: %s", what, wait, exc)
                backoff.wait(wait)
            else:
                self.report(None)
                return result
