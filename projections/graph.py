"""A LangGraph thread as a pure fold of its graph-topic records (no Kafka, no serde).

The checkpointer in `convdb.langgraph` reads its own writes from this state: it folds every
record it commits, and a restore folds the partition's log, so both read the same thread.
LangGraph's rules live here: a task's regular write at an index it already wrote is ignored,
a special write (a negative index: error, interrupt, scheduled, resume) overwrites; pending
writes read back in (task_path, task_id, index) order; "latest" is the greatest checkpoint id
of a namespace; a tombstone hides checkpoints and their writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from immutables import Map

from convdb.schemas.graph import GraphCheckpoint, GraphDeleted, GraphRecord, GraphWrites

CheckpointKey = tuple[str, str]
"""(checkpoint_ns, checkpoint_id)."""
BlobKey = tuple[str, str, str]
"""(checkpoint_ns, channel, version as text)."""
WriteKey = tuple[str, int]
"""(task_id, write index)."""


@dataclass(frozen=True)
class Write:
    """One pending write of a task, its value still serde bytes."""

    task_id: str
    task_path: str
    index: int
    channel: str
    value_type: str
    value: bytes


@dataclass(frozen=True)
class ThreadGraph:
    """Everything a thread's records say: checkpoints, channel blobs, pending writes."""

    checkpoints: Map[CheckpointKey, GraphCheckpoint]
    blobs: Map[BlobKey, tuple[str, bytes]]
    writes: Map[CheckpointKey, Map[WriteKey, Write]]

    @property
    def empty(self) -> bool:
        """True when the thread has no checkpoint and no write."""
        return not self.checkpoints and not self.writes


EMPTY = ThreadGraph(Map(), Map(), Map())


def fold(state: ThreadGraph, record: GraphRecord) -> ThreadGraph:
    """The thread after one record."""
    if isinstance(record, GraphCheckpoint):
        return _checkpoint(state, record)
    if isinstance(record, GraphWrites):
        return _writes(state, record)
    return _deleted(state, record)


def _checkpoint(state: ThreadGraph, record: GraphCheckpoint) -> ThreadGraph:
    ns = record.checkpoint_ns
    blobs = state.blobs.mutate()
    for channel, version, kind, value in zip(
        record.blob_channels, record.blob_versions, record.blob_types, record.blob_values, strict=True
    ):
        # Versions are unique across branches (the saver's `get_next_version`): a blob once
        # written never changes, so a fork cannot overwrite another branch's values.
        blobs[(ns, channel, version)] = (kind, value)
    return ThreadGraph(
        state.checkpoints.set((ns, record.checkpoint_id), record), blobs.finish(), state.writes
    )


def kept_indexes(state: ThreadGraph, key: CheckpointKey, task_id: str, indexes: list[int]) -> list[bool]:
    """Which writes at `indexes` a task's new writes record: not a regular one it already wrote."""
    existing = state.writes.get(key, Map())
    return [index < 0 or (task_id, index) not in existing for index in indexes]


def _writes(state: ThreadGraph, record: GraphWrites) -> ThreadGraph:
    key = (record.checkpoint_ns, record.checkpoint_id)
    writes = state.writes.get(key, Map()).mutate()
    rows = zip(record.write_indexes, record.channels, record.value_types, record.values, strict=True)
    for index, channel, kind, value in rows:
        if index >= 0 and (record.task_id, index) in writes:
            continue  # a task re-run after a crash writes again what it wrote: the first stays
        writes[(record.task_id, index)] = Write(record.task_id, record.task_path, index, channel, kind, value)
    return ThreadGraph(state.checkpoints, state.blobs, state.writes.set(key, writes.finish()))


def _deleted(state: ThreadGraph, record: GraphDeleted) -> ThreadGraph:
    if record.whole_thread:
        return EMPTY
    checkpoints, writes = state.checkpoints.mutate(), state.writes.mutate()
    for key in zip(record.checkpoint_namespaces, record.checkpoint_ids, strict=True):
        checkpoints.pop(key, None)
        writes.pop(key, None)
    # Blobs stay: versions are unique, and a kept checkpoint may read a blob a deleted one wrote.
    return ThreadGraph(checkpoints.finish(), state.blobs, writes.finish())


def namespaces(state: ThreadGraph) -> list[str]:
    """The thread's checkpoint namespaces, sorted."""
    return sorted({ns for ns, _ in state.checkpoints})


def history(state: ThreadGraph, ns: str) -> list[GraphCheckpoint]:
    """The checkpoints of a namespace, newest (greatest id) first."""
    found = [record for (n, _), record in state.checkpoints.items() if n == ns]
    return sorted(found, key=lambda r: r.checkpoint_id, reverse=True)


def latest(state: ThreadGraph, ns: str) -> GraphCheckpoint | None:
    """The namespace's checkpoint with the greatest id (LangGraph's "latest"), or None."""
    ids = [cid for n, cid in state.checkpoints if n == ns]
    return state.checkpoints[(ns, max(ids))] if ids else None


def is_fork(state: ThreadGraph, record: GraphCheckpoint) -> bool:
    """True when a root checkpoint does not extend the thread's latest one (`state` is the thread
    before it): `update_state` or a replay on an older checkpoint, or a `__copy__`, starts a new
    lineage there. A thread's first checkpoint, and one put again under its own id, are no fork."""
    if record.checkpoint_ns:
        return False
    head = latest(state, "")
    return (
        head is not None
        and record.checkpoint_id != head.checkpoint_id
        and (record.parent_checkpoint_id != head.checkpoint_id)
    )


def pending_writes(state: ThreadGraph, key: CheckpointKey) -> list[Write]:
    """The writes pending on a checkpoint, in LangGraph's (task_path, task_id, index) order."""
    writes = state.writes.get(key, Map())
    return sorted(writes.values(), key=lambda w: (w.task_path, w.task_id, w.index))


def blob(state: ThreadGraph, ns: str, channel: str, version: str) -> tuple[str, bytes] | None:
    """The (serde type, bytes) of a channel at a version, or None when never written."""
    return state.blobs.get((ns, channel, version))


def ancestors(state: ThreadGraph, ns: str, checkpoint_id: str | None) -> list[GraphCheckpoint]:
    """The parent chain of a checkpoint (the namespace's latest when None), nearest first, itself
    excluded; it stops at the root or at a parent that is not (or no longer) there."""
    target = state.checkpoints.get((ns, checkpoint_id)) if checkpoint_id else latest(state, ns)
    chain: list[GraphCheckpoint] = []
    current = target.parent_checkpoint_id if target else None
    while current is not None:
        record = state.checkpoints.get((ns, current))
        if record is None:
            break
        chain.append(record)
        current = record.parent_checkpoint_id
    return chain
