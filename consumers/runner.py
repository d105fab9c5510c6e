"""The exactly-once runner: Kafka batches in, projector rows plus consumed offsets out, in ONE transaction.

Loop: `consume()` a batch, decode every record once (poison -> DLQ), then in one store
transaction lock the batch's offset rows, hand each projector the records at or after its
stored offset, send the records a projector refused to the DLQ, write the new offsets, wait
until the DLQ writes are durable, and commit. The store side runs in a thread of its own
(`convdb.consumers._pipeline`), in batch order, while the next batch is consumed and decoded. On
partition assignment (after the batch in flight has committed) the runner seeks to the
stored offsets (the store is the source of truth; Kafka commits are only a courtesy for lag
tools). A crash anywhere therefore either
loses the whole batch (replayed after restart) or commits all of it: each record affects the
store exactly once, across crashes and rebalances.

One runner may host several projectors (`convdb consume all`): one consumer group, each record
decoded once, and one transaction covering every projector's rows and offsets. Offsets are
stored per projector, so a projector being rebuilt after a version change replays from the
start while the others skip what they already hold.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from sqlalchemy.engine import Engine

from convdb.consumers._commit import BatchWriter
from convdb.consumers._gc import batch_done, batch_loop
from convdb.consumers._pipeline import StorePipeline
from convdb.consumers._rows import key_of
from convdb.consumers.base import ConsumedRecord, Projector
from convdb.consumers.dlq import DeadLetters, Poison
from convdb.consumers.errors import ConsumerError
from convdb.consumers.metrics import ConsumerMetrics
from convdb.consumers.store import ensure_projections, open_engine
from convdb.consumers.store import stored_offsets as read_stored_offsets
from convdb.infra import tracing
from convdb.infra.kafka import apply_group_timeouts, consumer_config, is_incremental
from convdb.infra.records import coordinates
from convdb.infra.settings import Settings
from convdb.schemas import Codec, SingleObjectCodec, make_codec
from convdb.schemas.errors import InvalidRecordError, NotAvroError, SchemaError
from convdb.schemas.topics import Topic

logger = logging.getLogger(__name__)

_Written = tuple[dict[tuple[str, int], int], int]
"""A written batch: its next offset per topic-partition, and how many records it applied."""


@dataclass(frozen=True, slots=True)
class _Decoded:
    """A consumed batch, decoded: what the store side writes."""

    started: float
    records: list[ConsumedRecord]
    raw: dict[tuple[str, int, int], Message]
    poison: list[Poison]
    ends: dict[tuple[str, int], int]
    """The next offset of each topic-partition after the batch."""


class Runner:
    """Runs projectors as one consumer-group member until `stop()` (or SIGTERM via the CLI)."""

    def __init__(
        self,
        settings: Settings,
        projectors: Sequence[Projector],
        *,
        name: str | None = None,
        engine: Engine | None = None,
        codec: Codec | None = None,
        batch_size: int = 5000,
        poll_timeout: float = 0.05,
        gather_s: float = 0.01,
        store_retry_s: float = 60.0,
    ) -> None:
        if not projectors:
            raise ConsumerError("a runner needs at least one projector")
        self.settings = settings
        self.projectors = list(projectors)
        self.name = name or (projectors[0].name if len(projectors) == 1 else "all")
        self.engine = engine or open_engine(settings.resolved_store_url)
        self.codec = codec or make_codec(settings.schema_registry_url)
        self.batch_size = batch_size
        self.poll_timeout = poll_timeout
        self.gather_s = gather_s
        """After a batch's first record, how long to wait for more (latency against transactions/s)."""
        self.store_retry_s = store_retry_s
        self.metrics = ConsumerMetrics(self.name, unassigned_after_s=settings.ops.unassigned_after_s)
        self.topics: dict[str, Topic] = {
            t.name(settings.namespace): t for p in self.projectors for t in p.topics
        }
        self._readers = {
            name: [p for p in self.projectors if any(t.name(settings.namespace) == name for t in p.topics)]
            for name in self.topics
        }
        self._stop = threading.Event()
        self._consumer: Consumer | None = None
        self._assigned: list[TopicPartition] = []
        self.assigned_at: float | None = None
        """`time.perf_counter()` of the first partition assignment (benchmarks clock from it)."""
        self._dead = DeadLetters(settings, self.name)
        self._writer = BatchWriter(
            self.engine, self.projectors, settings.namespace, self._dead, self.metrics, store_retry_s
        )
        self._pipeline: StorePipeline[_Decoded, _Written] | None = None
        self._incremental = False
        """True when rebalances give and take only the partitions that move (`run` decides)."""

    @property
    def assignment(self) -> list[tuple[str, int]]:
        """The topic-partitions this member owns now."""
        return [(tp.topic, tp.partition) for tp in self._assigned]

    def stop(self) -> None:
        """Ask the loop to finish its batch, commit, leave the group and return."""
        self._stop.set()

    def run(self) -> None:
        """Consume until `stop()`; raises on infrastructure failures that outlast the retry deadline."""
        ensure_projections(self.engine, self.projectors)
        # Incremental where the broker can: a member joining or leaving moves only the partitions
        # that change hands, the others are read on without a pause.
        conf = consumer_config(self.settings, self.settings.group(self.name), incremental=True)
        self._incremental = is_incremental(conf)
        apply_group_timeouts(self.settings, self.settings.group(self.name))
        consumer = Consumer(conf)
        self._consumer = consumer
        # Batch N is written and committed in this thread while batch N+1 is consumed and decoded.
        pipeline = StorePipeline(self._write, f"convdb-{self.name}-store", after=batch_done)
        self._pipeline = pipeline
        consumer.subscribe(
            sorted(self.topics), on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )
        try:
            with batch_loop():
                self._loop(consumer, pipeline)
        finally:
            pipeline.close()
            self.metrics.healthy = False
            self._dead.close()
            consumer.close()
            logger.info("runner %s stopped", self.name)

    def _loop(self, consumer: Consumer, pipeline: StorePipeline[_Decoded, _Written]) -> None:
        last_lag, unreported = 0.0, False
        while not self._stop.is_set():
            messages = self._next_batch(consumer)
            if messages:
                pipeline.submit(self._decoded(messages))
                unreported = True
            self._commit_kafka(pipeline.finished())
            if (not messages and unreported) or time.monotonic() - last_lag > 1.0:
                # Lag and after-commit effects see committed batches only.
                self._commit_kafka(pipeline.drain())
                caught_up = self._update_lag(consumer)
                last_lag, unreported = time.monotonic(), False
                self._after_commit(caught_up)
            self.metrics.last_progress = time.monotonic()
            self.metrics.assignment.check()
        self._commit_kafka(pipeline.drain())

    def _next_batch(self, consumer: Consumer) -> list[Message]:
        # consume(n, t) waits out t unless n records come: wait for the first record only, then
        # briefly for the rest (a backlog fills the batch at once).
        first = consumer.consume(1, self.poll_timeout)
        if not first or self.batch_size <= 1:
            return first
        return first + consumer.consume(self.batch_size - 1, self.gather_s)

    def process(self, messages: Sequence[Message]) -> int:
        """Decode, apply and commit one batch in this thread; returns how many records were applied."""
        with batch_loop():
            ends, applied = self._write(self._decoded(messages))
        self._commit_kafka([(ends, applied)])
        return applied

    def _decoded(self, messages: Sequence[Message]) -> _Decoded:
        return _Decoded(time.monotonic(), *self._decode(messages))

    def _write(self, batch: _Decoded) -> _Written:
        """Dead-letter the poison, then apply and commit the batch; (its ends, records applied)."""
        # Each traced record gets a span (child of its producer's) covering its batch transaction.
        with tracing.record_spans(f"consumer {self.name}", list(batch.raw.values())):
            ends = batch.ends
            applied, dead = self._writer.write(batch.records, batch.raw, ends, batch.poison)
        self.metrics.batch_done(applied, dead, time.monotonic() - batch.started)
        return ends, applied

    def _decode(
        self, messages: Sequence[Message]
    ) -> tuple[
        list[ConsumedRecord], dict[tuple[str, int, int], Message], list[Poison], dict[tuple[str, int], int]
    ]:
        records: list[ConsumedRecord] = []
        raw: dict[tuple[str, int, int], Message] = {}
        poison: list[Poison] = []
        # The batch's ends, kept here: a second walk over `raw` for them was 1.6% of the runner's time.
        ends: dict[tuple[str, int], int] = {}
        decode = self.codec.decode
        keep_bytes = isinstance(self.codec, SingleObjectCodec)  # else payloads are re-encoded
        expected = {name: topic.value_types for name, topic in self.topics.items()}
        for msg in messages:
            err = msg.error()
            if err is not None:
                _check_consumer_error(err)
                continue
            topic, partition, offset = coordinates(msg)
            raw[(topic, partition, offset)] = msg
            if offset >= ends.get((topic, partition), 0):
                ends[(topic, partition)] = offset + 1
            value = msg.value()
            try:
                if value is None:
                    raise NotAvroError("null value (a tombstone) where a record was expected")
                decoded = decode(value, expect=expected[topic])
                key = key_of(msg.key(), decoded.conversation_id)
            except SchemaError as exc:
                poison.append((msg, exc))
                continue
            except Exception as exc:  # noqa: BLE001 - whatever one record makes the decoder raise
                poison.append((msg, InvalidRecordError(f"does not decode: {type(exc).__name__}: {exc}")))
                continue
            records.append(
                ConsumedRecord(
                    topic, partition, offset, msg.timestamp()[1], key, decoded, value if keep_bytes else None
                )
            )
        return records, raw, poison, ends

    def _commit_kafka(self, written: list[_Written]) -> None:
        # A courtesy for `kafka-consumer-groups`-style lag tools; positions come from the store.
        ends: dict[tuple[str, int], int] = {}
        for batch_ends, _applied in written:
            for tp, end in batch_ends.items():
                ends[tp] = max(ends.get(tp, 0), end)
        if self._consumer is None or not ends:
            return
        try:
            self._consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()], asynchronous=True
            )
        except KafkaException as exc:
            logger.debug("kafka commit skipped: %s", exc)

    def _drain(self) -> None:
        """Let the batch being written commit (a rebalance must see its offsets stored)."""
        if self._pipeline is not None:
            self._commit_kafka(self._pipeline.drain())

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._drain()
        wanted = [(tp.topic, tp.partition) for tp in partitions]
        names = [p.name for p in self.projectors]
        with self.engine.connect() as conn:
            stored = read_stored_offsets(conn, names, wanted)
            conn.rollback()
        for tp in partitions:
            starts = [stored.get((p.name, tp.topic, tp.partition), -1) for p in self._readers[tp.topic]]
            start = min(starts)
            tp.offset = start if start >= 0 else OFFSET_BEGINNING
        if self._incremental:  # the partitions given now, beside the ones kept
            consumer.incremental_assign(partitions)
            self._assigned = [*self._assigned, *partitions]
        else:
            consumer.assign(partitions)
            self._assigned = list(partitions)
        logger.info(  # the whole assignment, with the offset each partition started from
            "runner %s assigned %s", self.name, [(tp.topic, tp.partition, tp.offset) for tp in self._assigned]
        )
        if self.assigned_at is None:
            self.assigned_at = time.perf_counter()
        self.metrics.assignment.assign(wanted)

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._drain()
        logger.info("runner %s revoked %s", self.name, [(tp.topic, tp.partition) for tp in partitions])
        for tp in partitions:
            self.metrics.forget_partition(tp.topic, tp.partition)
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self._assigned = [tp for tp in self._assigned if (tp.topic, tp.partition) not in gone]
        self.metrics.assignment.revoke(gone)

    def _after_commit(self, caught_up: set[tuple[str, int]]) -> None:
        # Effects that must not run inside the store transaction (the titles service's LLM
        # call); they only see partitions that are fully consumed.
        for projector in self.projectors:
            try:
                projector.after_commit(self.engine, caught_up)
            except Exception:  # noqa: BLE001 - an effect outside the store: it fails, the consumer goes on
                logger.exception("%s: after-commit effect failed", projector.name)

    def _update_lag(self, consumer: Consumer) -> set[tuple[str, int]]:
        """Set the lag gauges; returns the partitions consumed up to the fetch-reported end."""
        caught_up: set[tuple[str, int]] = set()
        if not self._assigned:
            return caught_up
        try:
            positions = consumer.position(self._assigned)
        except KafkaException:
            return caught_up
        for tp in positions:
            try:
                _low, high = consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            if high >= 0 and tp.offset >= 0:
                self.metrics.set_lag(tp.topic, tp.partition, high - tp.offset)
                if tp.offset >= high:
                    caught_up.add((tp.topic, tp.partition))
        return caught_up


def _check_consumer_error(err: KafkaError) -> None:
    if err.code() == KafkaError._PARTITION_EOF:
        return
    if (
        err.fatal()
        or not err.retriable()
        and err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    ):
        raise ConsumerError(f"consumer failed: {err.str()}")
    logger.warning("consumer error (retrying): %s", err.str())
