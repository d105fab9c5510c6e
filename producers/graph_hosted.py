"""The checkpointer of one partition a fleet runner owns: LangGraph's writes as the conversation's.

Every checkpoint, task write and `@effect` ledger record goes through the conversation's `commit`,
that is the partition's fenced transactional writer (`{namespace}.runner.{partition}`): a zombie
runner's write raises `FencedError` and the runner drops the partition. Reads come from the
saver's own fold of the partition's graph records (read once, after the takeover fenced the
previous owner).

The `messages` channel of every root checkpoint is projected into convdb events
(`convdb.projections.graph_messages`) in the checkpoint's transaction. A fork (a root checkpoint
that does not extend the thread's latest one: `update_state` or a replay on an older checkpoint,
a `__copy__`) starts a convdb branch there (`graph_messages.place`): the active branch is the
graph's current lineage, the old lineage stays readable as the other branch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from convdb.infra.errors import InfraError
from convdb.producers.conversation import Conversation, SnapshotBook
from convdb.producers.graph_saver import ConvdbSaver
from convdb.producers.ledger import EMPTY as LEDGER_EMPTY
from convdb.producers.publisher import TransactionalPublisher
from convdb.projections import graph
from convdb.projections.graph_messages import event_ids, place
from convdb.projections.operation import OperationState
from convdb.schemas import ActionEvent, AvroModel, Event, LedgerRecord
from convdb.schemas.graph import GraphCheckpoint, GraphRecord
from convdb.schemas.topics import GRAPH

MESSAGES = "messages"
"""The channel projected into convdb events, and where a user message goes in."""


class Owner(SnapshotBook, Protocol):
    """What hosting needs of a partition owner (`producers.fleet.owner.PartitionOwner`, which
    imports this module: a protocol keeps the dependency one way)."""

    partition: int
    ctx: Any
    publisher: TransactionalPublisher
    sink: Any

    @property
    def conversations(self) -> dict[str, Conversation]:
        """The partition's conversations by id (`PartitionOwner.conversations`)."""


@dataclass
class _Batch:
    """Records of one thread held for one transaction (`HostedSaver.batch`)."""

    records: list[GraphRecord] = field(default_factory=list)


class _Known(Mapping[str, Event]):
    """The log's events by id: the view's, and those built in the commit under way."""

    def __init__(self, added: dict[str, Event], folded: Mapping[str, Event]) -> None:
        self.added, self.folded = added, folded

    def __getitem__(self, key: str) -> Event:
        found = self.added.get(key)
        return found if found is not None else self.folded[key]

    def __contains__(self, key: object) -> bool:
        return key in self.added or key in self.folded

    def __iter__(self) -> Iterator[str]:
        yield from self.added
        yield from (k for k in self.folded if k not in self.added)

    def __len__(self) -> int:
        return len(self.added) + sum(1 for k in self.folded if k not in self.added)


class HostedSaver(ConvdbSaver):
    """The checkpointer of one owned partition: writes through its conversations' commits."""

    def __init__(self, owner: Owner) -> None:
        super().__init__(owner.ctx.settings, codec=owner.ctx.codec)
        self.owner = owner
        self._restored = False
        self._batches: dict[str, _Batch] = {}
        self._heads: dict[str, tuple[str, frozenset[str]]] = {}
        """Per thread: the last root checkpoint projected, and the event ids of its messages (so
        a checkpoint that extends it needs no second load of its parent's messages)."""

    def _own(self, partition: int) -> Any:
        """The owner's writer; the partition's graph records are read on first use (after the
        owner's takeover fenced the previous one, so they are the whole committed truth)."""
        if partition != self.owner.partition:
            raise InfraError(
                f"a thread of partition {partition} is not hosted by the owner of partition "
                f"{self.owner.partition}: a hosted graph reads and writes its own thread only"
            )
        if not self._restored:
            self._restore(partition)
            self._restored = True
        return self.owner.publisher

    def _all_threads(self) -> dict[str, graph.ThreadGraph]:
        self._own(self.owner.partition)
        return self._threads

    def tenant_of(self, thread_id: str) -> str:
        """The conversation's tenant (its first inbox record fixed it)."""
        return self._conversation(thread_id).tenant_id

    def _conversation(self, thread_id: str) -> Conversation:
        conv = self.owner.conversations.get(thread_id)
        if conv is None:
            raise InfraError(f"thread {thread_id} is not a conversation of partition {self.owner.partition}")
        return conv

    def thread(self, thread_id: str) -> graph.ThreadGraph:
        """A thread's fold: this partition's own, another partition's read (never written) from
        the graph topic's committed records."""
        with self._lock:
            partition = self.partition_of(thread_id)
            if partition == self.owner.partition:
                return self._thread(thread_id)
            state = graph.EMPTY
            for record in self._read_partition(GRAPH, partition):
                if record.conversation_id == thread_id:
                    state = graph.fold(state, record)
            return state

    # -- writes: one transaction per thread, with the events its messages add -----------------
    def _commit(self, records: Sequence[GraphRecord]) -> None:
        """Each thread's records, with the events its `messages` channel adds, in one transaction
        of the partition's writer (its conversation's `commit`), then folded; inside `batch`,
        held for the batch's transaction."""
        self.check_sizes(records)
        by_thread: dict[str, list[GraphRecord]] = {}
        for record in records:
            by_thread.setdefault(record.conversation_id, []).append(record)
        for thread_id, group in by_thread.items():
            held = self._batches.get(thread_id)
            if held is not None:
                held.records.extend(group)
                self._fold(thread_id, group)
                continue
            conv = self._conversation(thread_id)
            before = self._threads.get(thread_id, graph.EMPTY)
            try:
                conv.commit(lambda c=conv, g=group, b=before: [*g, *self._events(c, g, b)])  # type: ignore[misc]
            except BaseException:
                self._heads.pop(thread_id, None)  # it may name a checkpoint that was not written
                raise
            self._fold(thread_id, group)

    def _fold(self, thread_id: str, group: Sequence[GraphRecord]) -> None:
        for r in group:
            self._threads[thread_id] = graph.fold(self._threads.get(thread_id, graph.EMPTY), r)

    @contextlib.contextmanager
    def batch(
        self, thread_id: str, first: Callable[[], list[AvroModel]] = list, *, project: bool = True
    ) -> Iterator[None]:
        """Everything the saver writes for the thread inside, in one transaction after `first()`'s
        records (a fork's `ForkEvent`); without `project`, its messages add no events (a copy of
        another thread, whose messages that thread's events already show)."""
        with self._lock:
            before = self._threads.get(thread_id, graph.EMPTY)
            held = self._batches[thread_id] = _Batch()
            try:
                yield
                conv = self._conversation(thread_id)
                conv.commit(
                    lambda: [
                        *first(),
                        *held.records,
                        *(self._events(conv, held.records, before) if project else []),
                    ]
                )
            except BaseException:
                self._threads[thread_id] = before  # nothing was written
                self._heads.pop(thread_id, None)
                raise
            finally:
                del self._batches[thread_id]
                if not project:
                    self._heads.pop(thread_id, None)

    def _events(
        self, conv: Conversation, group: Sequence[GraphRecord], before: graph.ThreadGraph
    ) -> list[AvroModel]:
        """The convdb events of the group's root checkpoints (`before` is the thread without them)."""
        out: list[AvroModel] = []
        view = conv.state.view
        added: dict[str, Event] = {}
        known = _Known(added, view.events)
        actions = {e.tool_call_id: e.id for e in view.events.values() if isinstance(e, ActionEvent)}
        prefix = {e.id for e in conv.loop.prefix}
        state = before
        for record in group:
            after = graph.fold(state, record)
            if isinstance(record, GraphCheckpoint) and not record.checkpoint_ns:
                for event in self._placed(conv, state, after, record, known, actions, prefix):
                    added[event.id] = event
                    out.append(event)
            state = after
        return out

    def _placed(
        self,
        conv: Conversation,
        before: graph.ThreadGraph,
        after: graph.ThreadGraph,
        record: GraphCheckpoint,
        known: Mapping[str, Event],
        actions: dict[str, str],
        prefix: set[str],
    ) -> list[Event]:
        """The events one root checkpoint adds (a branch switch first when it is a fork)."""
        cid = conv.conversation_id
        fork = graph.is_fork(before, record)
        wrote = MESSAGES in record.blob_channels
        parent = record.parent_checkpoint_id
        head = self._heads.get(cid)
        if not fork and not wrote:
            if head is not None and head[0] == parent:
                self._heads[cid] = (record.checkpoint_id, head[1])
            return []
        messages = self._messages_at(after, record)
        held = head[1] if head is not None and head[0] == parent else self._ids_at(after, cid, parent)
        path = conv.state.view.path
        placement = place(
            cid, messages, fork=fork, known=known, held=held | prefix if prefix else held,
            active_leaf=conv.leaf, root=path[0].id if len(path) else None, actions=actions,
        )  # fmt: skip
        self._heads[cid] = (record.checkpoint_id, placement.ids)
        out: list[Event] = []
        if placement.leaf is not None:
            out.append(conv.leaf_switch(placement.leaf))
        for p in placement.events:
            conv.start()  # (no-op but for a thread written before its first message)
            out.append(conv.new(p.cls, source=p.source, **p.fields))  # type: ignore[arg-type]
        return out

    def messages_version(self, record: GraphCheckpoint) -> str | None:
        """The version of the `messages` channel a checkpoint reads (None: it has none)."""
        for channel, version in zip(record.blob_channels, record.blob_versions, strict=True):
            if channel == MESSAGES:
                return version
        versions = self.serde.loads_typed((record.checkpoint_type, record.checkpoint))["channel_versions"]
        found = versions.get(MESSAGES)
        return None if found is None else str(found)

    def _messages_at(self, state: graph.ThreadGraph, record: GraphCheckpoint) -> list[Any]:
        """The `messages` value a root checkpoint holds ([] when it holds none)."""
        version = self.messages_version(record)
        stored = None if version is None else graph.blob(state, "", MESSAGES, version)
        if stored is None or stored[0] == "empty":
            return []
        return list(self.load_value(stored) or ())

    def _ids_at(self, state: graph.ThreadGraph, cid: str, checkpoint_id: str | None) -> frozenset[str]:
        """The event ids of a root checkpoint's messages (none for no checkpoint)."""
        record = state.checkpoints.get(("", checkpoint_id)) if checkpoint_id else None
        return frozenset(event_ids(cid, self._messages_at(state, record))) if record else frozenset()

    def fork_point(self, state: graph.ThreadGraph, event_id: str) -> str | None:
        """The root checkpoint a branch or fork at event `event_id` continues from: the first that
        held the message the event was projected from (the latest instead when it holds the same
        messages: nothing after it is run again); None when no checkpoint held it.

        The newest checkpoint that holds it is found first, then its ancestors while they hold it:
        an event of the current lineage costs a load per message version after it, not the history.
        """
        ids: dict[str | None, set[str]] = {}

        def holds(record: GraphCheckpoint) -> bool:
            version = self.messages_version(record)
            if version not in ids:
                ids[version] = event_ids(record.conversation_id, self._messages_at(state, record))
            return event_id in ids[version]

        found = next((r for r in graph.history(state, "") if holds(r)), None)
        if found is None:
            return None
        for ancestor in graph.ancestors(state, "", found.checkpoint_id):
            if not holds(ancestor):
                break
            found = ancestor
        head = graph.latest(state, "")
        if head is not None and self.messages_version(head) == self.messages_version(found):
            return head.checkpoint_id
        return found.checkpoint_id

    def copy_from(self, source: graph.ThreadGraph, target_thread_id: str) -> None:
        """`copy_thread` from a thread's fold (another partition's, read by `thread`)."""
        with self._lock:
            self._thread(target_thread_id)
            records = self.copied_records(source, target_thread_id)
            if records:
                self._commit(records)

    # -- the effect ledger: the conversation's own (`convdb.langgraph.effect`) ---------------------
    def operation(self, thread_id: str, operation_id: str) -> OperationState | None:
        """The operation's state in the conversation's ledger (folded at restore, kept by commits)."""
        with self._lock:
            self._thread(thread_id)
            return self._conversation(thread_id).ledger.get(operation_id)

    def commit_ledger(self, thread_id: str, records: Sequence[LedgerRecord]) -> OperationState | None:
        """Ledger records through the conversation's commit (the partition's fenced writer)."""
        with self._lock:
            self._thread(thread_id)
            conv = self._conversation(thread_id)
            conv.commit(lambda: list(records))
            return (conv.ledger or LEDGER_EMPTY).get(records[0].operation_id)

    def close(self) -> None:
        """Nothing to flush: the writer is the owner's."""
