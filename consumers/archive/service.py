"""The archive consumer service: Kafka -> `ArchiveSink` -> S3, offsets committed after each upload.

Not a `Projector` (it writes objects, not store rows): it runs its own loop in its own group
`<namespace>.archive`. Exactly-once by construction: an object is uploaded under a key that is
a pure function of its offset range, and only then is `end + 1` committed, synchronously. A
crash in between makes the next owner re-read from the committed offset and re-upload the
same key with the same bytes (see `sink.py` for why the boundaries recur). A commit the group
coordinator cannot take (its broker died) waits and is retried; the service rides it out.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from convdb.consumers.archive.container import RawRecord
from convdb.consumers.archive.errors import ArchiveError
from convdb.consumers.archive.metrics import ArchiveMetrics
from convdb.consumers.archive.sink import ArchiveSink, StoredObject
from convdb.consumers.archive.target import ArchiveTarget, open_target
from convdb.infra import tracing
from convdb.infra.kafka import make_consumer
from convdb.infra.liveness import AssignmentWatch
from convdb.infra.ops import Health
from convdb.infra.procs import on_stop_signal
from convdb.infra.records import coordinates, header_items
from convdb.infra.settings import Settings
from convdb.schemas.topics import ALL_TOPICS

logger = logging.getLogger(__name__)

_REBALANCED = {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID}
_COORDINATOR_AWAY = {
    KafkaError._WAIT_COORD,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT,
}
"""Commit errors of a group coordinator that is moving (its broker died): the commit waits."""
_COMMIT_RETRY_S = 1.0


def raw_record(msg: Message) -> RawRecord:
    """A consumed message as a `RawRecord` (bytes untouched)."""
    _, ts = msg.timestamp()
    return RawRecord(*coordinates(msg), ts, msg.key(), msg.value(), tuple(header_items(msg)))


class ArchiveConsumer:
    """Copies every record of the archived topics to the archive, byte-exact."""

    name = "archive"

    def __init__(self, settings: Settings, target: ArchiveTarget | None = None, prefix: str = "") -> None:
        self.settings = settings
        if target is None:
            target, prefix = open_target(settings)
        self.health = Health(settings.ops.stall_after_s)
        self.sink = ArchiveSink(
            target, prefix, settings.archive, report=lambda problem: self.health.problem("archive", problem)
        )
        by_suffix = {t.suffix: t for t in ALL_TOPICS}
        self.topics = [by_suffix[s].name(settings.namespace) for s in settings.archive.topics]
        self.objects_stored = 0
        self.records_archived = 0
        self.metrics = ArchiveMetrics()
        self.assignment = AssignmentWatch(
            "archive", settings.ops.unassigned_after_s, self.metrics.registry, self.health.problem
        )
        self._crash_after_put = _crash_point(settings.archive.crash_at)
        self._committed: dict[tuple[str, int], int] = {}
        self._deferred: dict[tuple[str, int], int] = {}
        self._deferred_at = 0.0
        self._traced: dict[tuple[str, int], list[tuple[Any, dict[str, Any]]]] = {}
        self._observed = 0.0

    def run(self, stop: threading.Event) -> None:
        """Archive until `stop` is set, then flush what is buffered, commit and leave the group.

        Raises:
            ArchiveError: the archive stayed unreachable past the put deadline.
            KafkaException: a non-retriable consumer error.
        """
        self.sink.setup()
        group = self.settings.group(self.name)
        consumer = make_consumer(self.settings, group)
        consumer.subscribe(
            self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )
        logger.info(
            "archive: copying %s into %s (group %s)", ", ".join(self.topics), self.sink.target.url, group
        )
        try:
            while not stop.is_set():
                self._poll(consumer)
                self.health.beat()
                self.assignment.check()
            for tp in self.sink.pending():
                self._store(consumer, tp)
            self._commit_deferred(consumer)
        finally:
            self.health.stopped = True
            consumer.close()
        logger.info("archive stopped: %d objects, %d records", self.objects_stored, self.records_archived)

    def _poll(self, consumer: Consumer) -> None:
        for msg in consumer.consume(1000, 0.5):
            err = msg.error()
            if err is not None:
                if err.fatal() or (not err.retriable() and err.code() != KafkaError._PARTITION_EOF):
                    raise KafkaException(err)
                continue
            record = raw_record(msg)
            parent = tracing.extract(record.headers)
            if parent is not None:
                self._traced.setdefault((record.topic, record.partition), []).append(
                    (parent, tracing.record_attributes(msg))
                )
            if self.sink.add(record):
                self._store(consumer, (record.topic, record.partition))
        for tp in self.sink.due():
            self._store(consumer, tp)
        if self._deferred and time.monotonic() - self._deferred_at > _COMMIT_RETRY_S:
            self._commit_deferred(consumer)
        if time.monotonic() - self._observed > 1.0:
            self._observe_lag(consumer)

    def _store(self, consumer: Consumer, tp: tuple[str, int]) -> StoredObject:
        with tracing.spans_for("archive.store", self._traced.pop(tp, [])):
            stored = self._store_object(consumer, tp)
        self.metrics.stored(stored)
        self._committed[tp] = stored.next_offset
        logger.info(
            "archive: stored %s (%d records, %d bytes)", stored.key, stored.index.records, stored.size
        )
        return stored

    def _store_object(self, consumer: Consumer, tp: tuple[str, int]) -> StoredObject:
        stored = self.sink.flush(tp)
        self.objects_stored += 1
        self.records_archived += stored.index.records
        if self._crash_after_put and self.objects_stored >= self._crash_after_put:
            logger.error("crash point after_put:%d reached: SIGKILL before the commit", self.objects_stored)
            os.kill(os.getpid(), signal.SIGKILL)
        self._commit(consumer, tp, stored.next_offset)
        return stored

    def _commit(self, consumer: Consumer, tp: tuple[str, int], offset: int) -> None:
        """Commit `offset` after a stored object; while the group coordinator moves, the commit waits.

        A commit that never happens costs a re-upload, never a loss: the next owner re-reads from
        the committed offset and stores the same key with the same bytes.
        """
        try:
            consumer.commit(offsets=[TopicPartition(*tp, offset)], asynchronous=False)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() in _REBALANCED:
                # The partition moved on: its next owner adopts the stored object's boundaries.
                logger.warning("%s[%d]: commit of %d lost to a rebalance", *tp, offset)
                self.sink.revoke(tp)
                self._deferred.pop(tp, None)
                return
            if error.code() not in _COORDINATOR_AWAY and not error.retriable():
                raise
            logger.warning("%s[%d]: commit of %d deferred: %s", *tp, offset, error.str())
            self._deferred[tp] = offset
            self._deferred_at = time.monotonic()
            return
        self._deferred.pop(tp, None)

    def _commit_deferred(self, consumer: Consumer) -> None:
        for tp, offset in list(self._deferred.items()):
            self._commit(consumer, tp, offset)

    def _observe_lag(self, consumer: Consumer) -> None:
        # Lag from the fetch-reported watermark (never ListOffsets, wrong on the embedded broker).
        self._observed = time.monotonic()
        try:
            assigned = consumer.assignment()
            positions = {(tp.topic, tp.partition): tp.offset for tp in consumer.position(assigned)}
            for tp in assigned:
                high = consumer.get_watermark_offsets(tp, cached=True)[1]
                done = self._committed.get(
                    (tp.topic, tp.partition), positions.get((tp.topic, tp.partition), -1)
                )
                if high >= 0 and done >= 0:
                    self.metrics.set_lag(tp.topic, tp.partition, high - done)
        except KafkaException as exc:
            logger.debug("archive lag not measured: %s", exc)

    def _on_assign(self, _consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        logger.info("archive assigned %s", [(p.topic, p.partition) for p in partitions])
        self.assignment.assign((p.topic, p.partition) for p in partitions)

    def _on_revoke(self, _consumer: Consumer, partitions: Sequence[TopicPartition]) -> None:
        # Buffers are dropped, not flushed: the next owner re-reads from the committed offset.
        for p in partitions:
            self.sink.revoke((p.topic, p.partition))
            self._traced.pop((p.topic, p.partition), None)
            self._committed.pop((p.topic, p.partition), None)
            self._deferred.pop((p.topic, p.partition), None)
            self.metrics.forget(p.topic, p.partition)
        self.assignment.revoke((p.topic, p.partition) for p in partitions)


def _crash_point(spec: str | None) -> int:
    if not spec:
        return 0
    name, _, n = spec.partition(":")
    if name != "after_put" or not n.isdigit():
        raise ArchiveError(f"unknown archive crash point {spec!r}; expected 'after_put:N'")
    return int(n)


def serve(settings: Settings) -> int:
    """Run the archive service until SIGTERM/SIGINT; returns the exit code."""
    stop = threading.Event()
    on_stop_signal(stop.set, "archive", settings.ops.stop_grace_s)
    ArchiveConsumer(settings).run(stop)
    return 0
