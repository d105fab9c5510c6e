"""A LangGraph checkpointer on convdb: checkpoints and task writes as typed records on the graph topic.

Standalone mode (this class used directly, as LangGraph's tests and tools do): the saver is the
fenced writer of every partition it touches. Touching a partition (any read or write of one of its
threads) opens that partition's transactional producer, `{namespace}.graph.{partition}`, and then
reads the partition's committed graph records into the pure fold `convdb.projections.graph`;
every later read is served from that fold (the saver reads its own writes, with no lag). Each
`put`, `put_writes` and deletion is one Kafka transaction. A second saver touching the same
partition takes the same transactional id and fences this one: this saver's next write raises
`FencedError`, and every later call on that partition raises it again, so two processes never
both extend a thread (langchain-ai/langgraph#8796 forks the chain silently instead).

What standalone mode does not do: it never learns of the takeover before its next write (reads
in between are served from its own, now stale, fold), and it does not share the fleet runner's
transactional ids, so it must not be pointed at threads a runner hosts.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from convdb.infra.errors import FencedError, InfraError
from convdb.infra.kafka import common_config
from convdb.infra.limits import HEADROOM, record_limit
from convdb.infra.partitioner import partition_for
from convdb.infra.reader import read_to_end
from convdb.infra.settings import Settings
from convdb.producers.errors import RecordTooLargeError
from convdb.producers.graph_values import ValueStore, dereference, reference
from convdb.producers.ledger import EMPTY as LEDGER_EMPTY
from convdb.producers.ledger import Ledger, fold_ledger
from convdb.producers.publisher import TransactionalPublisher
from convdb.projections import graph
from convdb.projections.graph import ThreadGraph
from convdb.projections.operation import OperationState
from convdb.schemas import AvroModel, Codec, LedgerRecord, SingleObjectCodec
from convdb.schemas.errors import SchemaError
from convdb.schemas.graph import GraphCheckpoint, GraphDeleted, GraphRecord, GraphWrites
from convdb.schemas.topics import EFFECTS, GRAPH, Topic
from convdb.schemas.validation import check_conversation_id

logger = logging.getLogger(__name__)

T = TypeVar("T")
V = TypeVar("V", bound=AvroModel)


def graph_transactional_id(settings: Settings, partition: int) -> str:
    """The transactional id of a standalone saver's writes to one partition (any saver's)."""
    return f"{settings.namespace}.graph.{partition}"


def record_id() -> str:
    """A fresh record id (UUID text) from the OS's randomness, not `uuid.uuid4`: a graph's own code
    (and LangGraph's tests) may patch `uuid4` to make its message ids deterministic, and a saver
    drawing from that sequence would shift them."""
    return str(uuid.UUID(bytes=os.urandom(16), version=4))


SIZE_SLACK = 64 * 1024
"""Bytes a graph record may carry besides its values' (ids, types, metadata, Avro framing)."""


def _values(record: GraphRecord) -> list[tuple[str, bytes]]:
    """A record's serialized values, named (`channel 'x'`, `checkpoint`, `metadata`)."""
    if isinstance(record, GraphCheckpoint):
        blobs = [(f"channel {c!r}", v) for c, v in zip(record.blob_channels, record.blob_values, strict=True)]
        return [("checkpoint", record.checkpoint), ("metadata", record.metadata), *blobs]
    if isinstance(record, GraphWrites):
        return [(f"write to {c!r}", v) for c, v in zip(record.channels, record.values, strict=True)]
    return []


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


class ConvdbSaver(BaseCheckpointSaver[str]):
    """LangGraph's `BaseCheckpointSaver` on Kafka: a thread is a conversation, its id the record key.

    Thread-safe (one lock): LangGraph calls it from its executor threads and, through the async
    methods, from worker threads of the event loop.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        tenant_id: str = "default",
        serde: SerializerProtocol | None = None,
        codec: Codec | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.settings = settings
        self.tenant_id = tenant_id
        self.codec = codec or SingleObjectCodec()
        self.topic = GRAPH.name(settings.namespace)
        self._lock = threading.RLock()
        self._writers: dict[int, TransactionalPublisher] = {}
        self._fenced: dict[int, FencedError] = {}
        self._threads: dict[str, ThreadGraph] = {}
        self._ledgers: dict[str, Ledger] = {}
        self._effects_read: set[int] = set()
        self.large_value_bytes = record_limit(settings) // 4
        """A value larger than this goes to the archive bucket by reference (when there is one)."""
        self._values = ValueStore(settings) if settings.archive_url else None

    # -- partitions: ownership, restore, commit ---------------------------------------------
    def partition_of(self, thread_id: str) -> int:
        """The partition a thread's records (and its conversation's) are in."""
        return partition_for(thread_id, self.settings.partitions)

    def _own(self, partition: int) -> TransactionalPublisher:
        """This partition's writer: taken over (fencing the previous one) and restored on first use."""
        if partition in self._fenced:
            raise self._fenced[partition]
        writer = self._writers.get(partition)
        if writer is None:
            # Fence first, read second: once `init_transactions` returns, no other saver can commit
            # to the partition, so what is read now is the whole committed truth.
            writer = TransactionalPublisher(
                self.settings, self.codec, graph_transactional_id(self.settings, partition)
            )
            self._restore(partition)
            self._writers[partition] = writer
        return writer

    def open(self, thread_ids: Sequence[str] | None = None) -> None:
        """Take the partitions of `thread_ids` (every partition when None) now, not at first use:
        a saver that serves a graph at once (or a partition's owner) pays the takeover up front."""
        with self._lock:
            if thread_ids is None:
                self._all_threads()
            for thread_id in thread_ids or ():
                self._thread(thread_id)

    def _restore(self, partition: int) -> None:
        """Fold the partition's committed graph records."""
        for record in self._read_partition(GRAPH, partition):
            cid = record.conversation_id
            self._threads[cid] = graph.fold(self._threads.get(cid, graph.EMPTY), record)

    def _read_partition(self, topic: Topic[V], partition: int) -> builtins.list[V]:
        """The committed records of one partition of a topic (none to read: the watermarks say so at once)."""
        name = topic.name(self.settings.namespace)
        consumer = Consumer(
            {**common_config(self.settings), "group.id": f"{self.settings.namespace}.graph-{record_id()}"}
        )
        try:
            low, high = _watermarks(consumer, TopicPartition(name, partition))
        except KafkaException as exc:
            raise InfraError(f"cannot read {name}[{partition}] (run `convdb topics apply`): {exc}") from exc
        finally:
            consumer.close()
        if high <= low:
            return []
        start = TopicPartition(name, partition, OFFSET_BEGINNING)
        read = read_to_end(self.settings, [start], purpose="graph-restore")[(name, partition)]
        found = []
        for msg in read.records:
            try:
                found.append(self.codec.decode(msg.value() or b"", expect=topic.value_types))
            except SchemaError as exc:
                logger.error("%s[%d] offset %s: record skipped: %s", name, partition, msg.offset(), exc)
        return found

    def _thread(self, thread_id: str) -> ThreadGraph:
        """A thread's folded state (its partition owned and restored first)."""
        check_conversation_id(thread_id, "thread_id")
        self._own(self.partition_of(thread_id))
        return self._threads.get(thread_id, graph.EMPTY)

    def _all_threads(self) -> dict[str, ThreadGraph]:
        for partition in range(self.settings.partitions):
            self._own(partition)
        return self._threads

    def _publish(self, partition: int, records: Sequence[tuple[Topic[Any], AvroModel]]) -> None:
        """One transaction on the partition's writer; a fenced writer is dropped for good."""
        writer = self._own(partition)
        try:
            writer.publish_atomic(records)
        except FencedError as exc:
            self._fenced[partition] = exc
            del self._writers[partition]
            raise

    def dump_value(self, value: Any) -> tuple[str, bytes]:
        """A channel value or write, serialized; by reference to the archive bucket when large."""
        kind, data = self.serde.dumps_typed(value)
        if self._values is None or len(data) <= self.large_value_bytes:
            return kind, data
        key, digest = self._values.put(data)  # before the record that refers to it
        return reference(kind, key, digest, len(data))

    def load_value(self, typed: tuple[str, bytes]) -> Any:
        """A value `dump_value` serialized (fetched from the archive bucket when by reference)."""
        return self.serde.loads_typed(dereference(self._values, typed))

    def check_sizes(self, records: Sequence[GraphRecord]) -> None:
        """Refuse a record larger than the record size limit before anything is written.

        Raises:
            RecordTooLargeError: naming the record, its size, the limit and its largest values
                (with no archive bucket to move large values to, or many values that are each
                below a quarter of the limit).
        """
        limit = record_limit(self.settings)
        for record in records:
            values = _values(record)
            if sum(len(v) for _, v in values) + SIZE_SLACK < limit:
                continue  # far from the limit: no second encoding
            size = len(self.codec.encode(record)) + len(record.conversation_id.encode()) + HEADROOM
            if size > limit:
                largest = ", ".join(
                    f"{name} {len(v)} bytes" for name, v in sorted(values, key=lambda x: -len(x[1]))[:3]
                )
                raise RecordTooLargeError(
                    f"thread {record.conversation_id}: a {type(record).__name__} of {size} bytes is above "
                    f"the record size limit of {limit} bytes (CONVDB_RUNTIME__MAX_RECORD_BYTES; the "
                    f"broker's message.max.bytes must allow it too); largest values: {largest}. A value "
                    f"above {self.large_value_bytes} bytes goes to the archive bucket by reference when "
                    "CONVDB_ARCHIVE_URL is set; else keep large data out of the graph's state"
                )

    def _commit(self, records: Sequence[GraphRecord]) -> None:
        """Make records durable, one transaction per partition, then fold them."""
        self.check_sizes(records)
        by_partition: dict[int, list[GraphRecord]] = {}
        for record in records:
            by_partition.setdefault(self.partition_of(record.conversation_id), []).append(record)
        for partition, group in by_partition.items():
            self._publish(partition, [(GRAPH, r) for r in group])
            for r in group:
                self._threads[r.conversation_id] = graph.fold(
                    self._threads.get(r.conversation_id, graph.EMPTY), r
                )

    # -- the effect ledger of a thread (`convdb.langgraph.effect`) --------------------------------
    def operation(self, thread_id: str, operation_id: str) -> OperationState | None:
        """The ledger state of one operation of the thread (its partition's effects read first)."""
        with self._lock:
            self._thread(thread_id)
            partition = self.partition_of(thread_id)
            if partition not in self._effects_read:
                for record in self._read_partition(EFFECTS, partition):
                    cid = record.conversation_id
                    self._ledgers[cid] = fold_ledger(self._ledgers.get(cid, LEDGER_EMPTY), record)
                self._effects_read.add(partition)
            return self._ledgers.get(thread_id, LEDGER_EMPTY).get(operation_id)

    def commit_ledger(self, thread_id: str, records: Sequence[LedgerRecord]) -> OperationState | None:
        """Make ledger records durable on the effects topic through the thread's fenced writer, fold
        them with the operation machine, and return the operation's new state."""
        with self._lock:
            self.operation(thread_id, records[0].operation_id)
            self._publish(self.partition_of(thread_id), [(EFFECTS, r) for r in records])
            ledger = self._ledgers.get(thread_id, LEDGER_EMPTY)
            for record in records:
                ledger = fold_ledger(ledger, record)
            self._ledgers[thread_id] = ledger
            return ledger.get(records[0].operation_id)

    def tenant_of(self, thread_id: str) -> str:  # noqa: ARG002 - a hosted saver's depends on it
        """The tenant a thread's records carry (standalone: the saver's)."""
        return self.tenant_id

    def _fields(self, thread_id: str) -> dict[str, Any]:
        return {
            "id": record_id(),
            "conversation_id": thread_id,
            "tenant_id": self.tenant_of(thread_id),
            "timestamp": datetime.now(UTC),
        }

    # -- reads --------------------------------------------------------------------------------
    def _tuple(
        self,
        thread_id: str,
        state: ThreadGraph,
        record: GraphCheckpoint,
        config: RunnableConfig | None = None,
    ) -> CheckpointTuple:
        ns = record.checkpoint_ns
        checkpoint: Checkpoint = self.serde.loads_typed((record.checkpoint_type, record.checkpoint))
        values: dict[str, Any] = {}
        for channel, version in checkpoint["channel_versions"].items():
            found = graph.blob(state, ns, channel, str(version))
            if found is not None and found[0] != "empty":
                values[channel] = self.load_value(found)
        writes = graph.pending_writes(state, (ns, record.checkpoint_id))
        parent = record.parent_checkpoint_id
        return CheckpointTuple(
            config=config or _config(thread_id, ns, record.checkpoint_id),
            checkpoint={**checkpoint, "channel_values": values},
            metadata=self.serde.loads_typed((record.metadata_type, record.metadata)),
            parent_config=_config(thread_id, ns, parent) if parent else None,
            pending_writes=[(w.task_id, w.channel, self.load_value((w.value_type, w.value))) for w in writes],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint `config` names, or the namespace's latest; None when there is none."""
        thread_id = config["configurable"]["thread_id"]
        ns = config["configurable"].get("checkpoint_ns", "")
        with self._lock:
            state = self._thread(thread_id)
            if checkpoint_id := get_checkpoint_id(config):
                record = state.checkpoints.get((ns, checkpoint_id))
                return self._tuple(thread_id, state, record, config) if record else None
            latest = graph.latest(state, ns)
            return self._tuple(thread_id, state, latest) if latest else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first per namespace (every thread's when `config` is None)."""
        return iter(self._list(config, filter, before, limit))

    def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> builtins.list[CheckpointTuple]:
        with self._lock:
            if config:
                thread_id = config["configurable"]["thread_id"]
                threads = {thread_id: self._thread(thread_id)}
            else:
                threads = dict(self._all_threads())
            only_ns = config["configurable"].get("checkpoint_ns") if config else None
            only_id = get_checkpoint_id(config) if config else None
            before_id = get_checkpoint_id(before) if before else None
            found: builtins.list[CheckpointTuple] = []
            for thread_id, state in threads.items():
                for ns in graph.namespaces(state):
                    if only_ns is not None and ns != only_ns:
                        continue
                    for record in graph.history(state, ns):
                        if limit is not None and len(found) >= limit:
                            return found
                        if only_id and record.checkpoint_id != only_id:
                            continue
                        if before_id and record.checkpoint_id >= before_id:
                            continue
                        if filter:
                            metadata = self.serde.loads_typed((record.metadata_type, record.metadata))
                            if not all(metadata.get(k) == v for k, v in filter.items()):
                                continue
                        found.append(self._tuple(thread_id, state, record))
            return found

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Each channel's writes along the checkpoint's parent chain, back to the nearest ancestor
        that stores a value for it (its seed), from the fold's index: no ancestor is loaded whole."""
        if not channels:
            return {}
        thread_id = config["configurable"]["thread_id"]
        ns = config["configurable"].get("checkpoint_ns", "")
        collected: dict[str, builtins.list[PendingWrite]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        with self._lock:
            state = self._thread(thread_id)
            for record in graph.ancestors(state, ns, get_checkpoint_id(config)):
                if not remaining:
                    break
                versions = self.serde.loads_typed((record.checkpoint_type, record.checkpoint))[
                    "channel_versions"
                ]
                found_here: dict[str, Any] = {}
                for channel in remaining:
                    version = versions.get(channel)
                    stored = None if version is None else graph.blob(state, ns, channel, str(version))
                    if stored is not None and stored[0] != "empty":
                        found_here[channel] = self.load_value(stored)
                for w in reversed(graph.pending_writes(state, (ns, record.checkpoint_id))):
                    if w.channel in remaining:
                        value = self.load_value((w.value_type, w.value))
                        collected[w.channel].append((w.task_id, w.channel, value))
                seeds.update(found_here)
                remaining -= set(found_here)
        result: dict[str, DeltaChannelHistory] = {}
        for channel in channels:
            entry: DeltaChannelHistory = {"writes": builtins.list(reversed(collected[channel]))}
            if channel in seeds:
                entry["seed"] = seeds[channel]
            result[channel] = entry
        return result

    # -- writes -------------------------------------------------------------------------------
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Record a checkpoint with the blobs of the channels `new_versions` names (one transaction)."""
        thread_id = config["configurable"]["thread_id"]
        ns = config["configurable"].get("checkpoint_ns", "")
        stripped = checkpoint.copy()
        values: dict[str, Any] = stripped.pop("channel_values")  # type: ignore[misc]
        blobs = [
            (
                channel,
                str(version),
                *(self.dump_value(values[channel]) if channel in values else ("empty", b"")),
            )
            for channel, version in new_versions.items()
        ]
        checkpoint_type, checkpoint_bytes = self.serde.dumps_typed(stripped)
        metadata_type, metadata_bytes = self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))
        with self._lock:
            self._thread(thread_id)
            record = GraphCheckpoint(
                **self._fields(thread_id),
                checkpoint_ns=ns,
                checkpoint_id=checkpoint["id"],
                parent_checkpoint_id=config["configurable"].get("checkpoint_id"),
                checkpoint_type=checkpoint_type,
                checkpoint=checkpoint_bytes,
                metadata_type=metadata_type,
                metadata=metadata_bytes,
                blob_channels=tuple(b[0] for b in blobs),
                blob_versions=tuple(b[1] for b in blobs),
                blob_types=tuple(b[2] for b in blobs),
                blob_values=tuple(b[3] for b in blobs),
            )
            self._commit([record])
        return _config(thread_id, ns, checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Record a task's writes on its checkpoint; a regular write the task already made is not repeated."""
        thread_id = config["configurable"]["thread_id"]
        ns = config["configurable"].get("checkpoint_ns", "")
        checkpoint_id = config["configurable"]["checkpoint_id"]
        indexes = [WRITES_IDX_MAP.get(channel, i) for i, (channel, _) in enumerate(writes)]
        with self._lock:
            state = self._thread(thread_id)
            kept = graph.kept_indexes(state, (ns, checkpoint_id), task_id, indexes)
            rows = [(i, w) for i, w, keep in zip(indexes, writes, kept, strict=True) if keep]
            if not rows:
                return
            typed = [self.dump_value(value) for _, (_, value) in rows]
            record = GraphWrites(
                **self._fields(thread_id),
                checkpoint_ns=ns,
                checkpoint_id=checkpoint_id,
                task_id=task_id,
                task_path=task_path,
                write_indexes=tuple(i for i, _ in rows),
                channels=tuple(channel for _, (channel, _) in rows),
                value_types=tuple(t for t, _ in typed),
                values=tuple(v for _, v in typed),
            )
            self._commit([record])

    def get_next_version(self, current: str | None, channel: None) -> str:  # noqa: ARG002
        """The next version: a counter plus a random part, so two branches never issue the same one
        (a fork re-issuing a plain integer would overwrite the other branch's blob)."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{os.urandom(8).hex()}"

    # -- deletion and copies: tombstones and copied records -----------------------------------
    def _tombstone(self, thread_id: str, reason: str, keys: Sequence[tuple[str, str]] | None) -> GraphDeleted:
        return GraphDeleted(
            **self._fields(thread_id),
            reason=reason,
            whole_thread=keys is None,
            checkpoint_namespaces=tuple(ns for ns, _ in keys or ()),
            checkpoint_ids=tuple(cid for _, cid in keys or ()),
        )

    def delete_thread(self, thread_id: str) -> None:
        """Hide every checkpoint and write of a thread (a tombstone: the log keeps the bytes until
        retention expires)."""
        with self._lock:
            if not self._thread(thread_id).empty:
                self._commit([self._tombstone(thread_id, "delete_thread", None)])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Hide the checkpoints (and their writes) whose metadata names one of `run_ids`, in every thread."""
        wanted = set(run_ids)
        if not wanted:
            return
        with self._lock:
            tombstones = []
            for thread_id, state in self._all_threads().items():
                keys = [
                    key
                    for key, record in state.checkpoints.items()
                    if self.serde.loads_typed((record.metadata_type, record.metadata)).get("run_id") in wanted
                ]
                if keys:
                    tombstones.append(self._tombstone(thread_id, "delete_for_runs", keys))
            self._commit(tombstones)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only each namespace's latest checkpoint (`keep_latest`), or nothing (`delete`)."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        with self._lock:
            tombstones = []
            for thread_id in thread_ids:
                state = self._thread(thread_id)
                if state.empty:
                    continue
                if strategy == "delete":
                    tombstones.append(self._tombstone(thread_id, "prune", None))
                    continue
                latest = {ns: graph.latest(state, ns) for ns in graph.namespaces(state)}
                keys = [
                    (ns, cid)
                    for ns, cid in state.checkpoints
                    if cid != latest[ns].checkpoint_id  # type: ignore[union-attr]
                ]
                keys += [key for key in state.writes if key not in state.checkpoints]
                if keys:
                    tombstones.append(self._tombstone(thread_id, "prune", keys))
            self._commit(tombstones)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint (with the blobs it reads) and write of a thread to another thread,
        in one transaction."""
        with self._lock:
            source = self._thread(source_thread_id)
            self._thread(target_thread_id)
            records = self.copied_records(source, target_thread_id)
            if records:
                self._commit(records)

    def copied_records(self, source: ThreadGraph, target_thread_id: str) -> builtins.list[GraphRecord]:
        """The records of `copy_thread`: every checkpoint of `source` (a thread's fold), oldest
        first, with the blobs it reads, and every task write, as records of the target thread."""
        records: builtins.list[GraphRecord] = []
        carried: set[tuple[str, str, str]] = set()
        for ns in graph.namespaces(source):
            for record in reversed(graph.history(source, ns)):
                records.append(self._copied_checkpoint(source, record, target_thread_id, carried))
        for (ns, cid), writes in source.writes.items():
            for task_id in sorted({w.task_id for w in writes.values()}):
                mine = [w for w in graph.pending_writes(source, (ns, cid)) if w.task_id == task_id]
                records.append(
                    GraphWrites(
                        **self._fields(target_thread_id),
                        checkpoint_ns=ns,
                        checkpoint_id=cid,
                        task_id=task_id,
                        task_path=mine[0].task_path,
                        write_indexes=tuple(w.index for w in mine),
                        channels=tuple(w.channel for w in mine),
                        value_types=tuple(w.value_type for w in mine),
                        values=tuple(w.value for w in mine),
                    )
                )
        return records

    def _copied_checkpoint(
        self, source: ThreadGraph, record: GraphCheckpoint, target: str, carried: set[tuple[str, str, str]]
    ) -> GraphCheckpoint:
        """`record` on the target thread, carrying every blob it reads that no earlier copy carried."""
        ns = record.checkpoint_ns
        checkpoint = self.serde.loads_typed((record.checkpoint_type, record.checkpoint))
        blobs = []
        for channel, version in checkpoint["channel_versions"].items():
            key = (ns, channel, str(version))
            found = graph.blob(source, *key)
            if found is not None and key not in carried:
                carried.add(key)
                blobs.append((channel, str(version), *found))
        return record.model_copy(
            update={
                **self._fields(target),
                "blob_channels": tuple(b[0] for b in blobs),
                "blob_versions": tuple(b[1] for b in blobs),
                "blob_types": tuple(b[2] for b in blobs),
                "blob_values": tuple(b[3] for b in blobs),
            }
        )

    # -- async twins: the same calls on a worker thread ----------------------------------------
    async def _run(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(call, *args, **kwargs)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """`get_tuple` off the event loop."""
        return await self._run(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """`list` off the event loop."""
        for item in await self._run(self._list, config, filter, before, limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """`put` off the event loop."""
        return await self._run(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """`put_writes` off the event loop."""
        await self._run(self.put_writes, config, writes, task_id, task_path)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """`get_delta_channel_history` off the event loop."""
        return await self._run(self.get_delta_channel_history, config=config, channels=channels)

    async def adelete_thread(self, thread_id: str) -> None:
        """`delete_thread` off the event loop."""
        await self._run(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """`delete_for_runs` off the event loop."""
        await self._run(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """`copy_thread` off the event loop."""
        await self._run(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`prune` off the event loop."""
        await self._run(self.prune, thread_ids, strategy=strategy)

    def close(self) -> None:
        """Flush and drop the partition writers (a closed saver reopens a partition on next use)."""
        with self._lock:
            for writer in self._writers.values():
                writer.flush(5.0)
            self._writers.clear()
            self._threads.clear()
            self._ledgers.clear()
            self._effects_read.clear()


NO_LEADER_YET = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
"""The answers of a broker that has not learnt the new partition's leader yet."""
WATERMARK_WAIT_S = 10.0
"""How long a partition's watermarks are asked for while the broker answers with a retriable error."""


def _watermarks(consumer: Consumer, partition: TopicPartition) -> tuple[int, int]:
    """The partition's (low, high) watermarks. A topic created a moment ago may have no leader
    yet on every broker (Apache Kafka answers NOT_LEADER_FOR_PARTITION): that error, and any other
    retriable one, is asked again until `WATERMARK_WAIT_S` has passed."""
    deadline = time.monotonic() + WATERMARK_WAIT_S
    while True:
        try:
            low, high = consumer.get_watermark_offsets(partition, timeout=WATERMARK_WAIT_S)
            return low, high
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError) or time.monotonic() > deadline:
                raise
            if not (error.retriable() or error.code() in NO_LEADER_YET):
                raise
            time.sleep(0.1)
