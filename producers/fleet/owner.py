"""One owned partition: its transactional writer, its conversations, their restore and snapshots.

Creating an owner calls `init_transactions` for ``{namespace}.runner.{partition}``, which fences
any older writer of the partition (a zombie runner) before anything is read or written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer

from convdb.infra.dlq import error_headers
from convdb.infra.limits import record_limit
from convdb.infra.partitioner import partition_for
from convdb.infra.producer import Delivery
from convdb.infra.settings import Settings
from convdb.producers.conversation import Conversation
from convdb.producers.delegation import is_derived_child_id, link_from_inbox
from convdb.producers.errors import (
    AgentLoadError,
    AgentMismatchError,
    DelegationRefusedError,
    UnknownAgentError,
)
from convdb.producers.fleet import external
from convdb.producers.fleet.lazy import Conversations, is_quiet
from convdb.producers.fleet.limits import check_sizes, fit_dead_letter
from convdb.producers.fleet.restore import PartitionTail, Refused, restore_conversation, restore_partition
from convdb.producers.fleet.sink import PartitionSink
from convdb.producers.fleet.snapshot import build_snapshot
from convdb.producers.fleet.store import SnapshotStore
from convdb.producers.observe import RunnerMetrics
from convdb.producers.positions import LogPositions
from convdb.producers.publisher import TransactionalPublisher
from convdb.producers.runtime import Runtime
from convdb.producers.state import ConversationState
from convdb.projections.errors import UnknownEventError
from convdb.projections.openhands import OpenHandsState
from convdb.projections.tenancy import check_owner
from convdb.projections.view import ViewState, active_branch, path_to_root
from convdb.schemas import (
    AvroModel,
    Codec,
    Event,
    ExternalBatch,
    ForkEvent,
    InboxMessage,
    LedgerRecord,
    MessageEvent,
    Snapshot,
    SystemPromptEvent,
)
from convdb.schemas.graph import GraphCheckpoint, GraphDeleted, GraphWrites
from convdb.schemas.topics import DLQ, INBOX

logger = logging.getLogger(__name__)


@dataclass
class FleetContext:
    """What every owned partition of a runner shares."""

    settings: Settings
    runtime: Runtime
    store: SnapshotStore
    metrics: RunnerMetrics = field(default_factory=RunnerMetrics)

    @property
    def codec(self) -> Codec:
        """The record codec."""
        return self.runtime.codec


def transactional_id(settings: Settings, partition: int) -> str:
    """The transactional id of a partition's writer: one per partition, whoever owns it."""
    return f"{settings.namespace}.runner.{partition}"


Restored = tuple[ConversationState, LogPositions]


class PartitionOwner:
    """The single writer of one partition's conversations (and their `SnapshotBook`)."""

    def __init__(self, ctx: FleetContext, partition: int, consumer: Consumer | None) -> None:
        self.ctx = ctx
        self.partition = partition
        self.transactional_id = transactional_id(ctx.settings, partition)
        started = time.perf_counter()
        self.publisher = TransactionalPublisher(ctx.settings, ctx.codec, self.transactional_id)
        self.fence_s = time.perf_counter() - started
        """How long fencing the previous writer took (`init_transactions`)."""
        self.sink = PartitionSink(self.publisher, consumer, INBOX.name(ctx.settings.namespace), partition)
        self.conversations = Conversations(self._restore_pending)
        """Restored conversations, and quiet ones restored on first lookup (`lazy`)."""
        self._tail: PartitionTail | None = None
        """The takeover's read, kept while conversations of it are pending."""
        graphs = ctx.runtime.graphs
        self.lazy = graphs is None or (graphs.default is None and not graphs.installed())
        """Whether quiet conversations are restored when needed (`lazy`); a runner that hosts
        LangGraph graphs restores every conversation with its partition, as it always did."""
        self.unavailable: dict[str, Exception] = {}
        """Restored conversations whose agent does not load here, and why (never run)."""
        self.external: dict[str, OpenHandsState] = {}
        """The OpenHands mapping state of conversations run elsewhere, kept between their batches."""
        self.events_end = 0
        self.effects_end = 0
        self.report: dict[str, object] = {}
        self.record_limit = record_limit(ctx.settings)

    # -- restore ------------------------------------------------------------------------
    def restore(self) -> dict[str, object]:
        """Rebuild the partition's conversations from snapshots and tails: those that may have work
        now, the quiet rest when first needed (`lazy`, `restore_pending`).

        Records of the partition's state, events and effects topics that are not what they
        should be (another producer's, undecodable, refused by the fold) are dead-lettered and
        skipped: one such record never stops a restore (nor, so, the runner).
        """
        started = time.perf_counter()
        tail = restore_partition(self.ctx.settings, self.ctx.codec, self.ctx.store, self.partition)
        self.events_end, self.effects_end = tail.events_end, tail.effects_end
        refused = list(tail.refused)
        pending = {
            cid: snap
            for cid, snap in tail.snapshots.items()
            if self.lazy and is_quiet(snap, self.ctx.codec, cid in tail.events or cid in tail.ledger)
        }
        found = {
            cid: restore_conversation(self.ctx.codec, tail, cid, refused)
            for cid in {*tail.snapshots, *tail.events}
            if cid not in pending
        }
        restored = {cid: r for cid, r in found.items() if r is not None}
        self.conversations.pending = pending
        self._tail = tail if pending else None
        for cid, (state, positions) in restored.items():
            self._create_restored(tail, cid, state, positions, restored)
        self._dead_letter(refused)
        self.report = {
            "partition": self.partition,
            "source": tail.source,
            "conversations": len(self.conversations) + len(pending),
            "restored_now": len(self.conversations),
            "pending": len(pending),
            "state_read": tail.state_read,
            "events_read": tail.events_read,
            "effects_read": tail.effects_read,
            "tail_events": {cid: len(v) for cid, v in tail.events.items()},
            "refused": len(refused),
            "ms": round(tail.seconds * 1000, 2),
            "fence_ms": round(self.fence_s * 1000, 2),
            "restore_ms": round((time.perf_counter() - started) * 1000, 2),
        }
        return self.report

    def _create_restored(
        self,
        tail: PartitionTail,
        cid: str,
        state: ConversationState,
        positions: LogPositions,
        restored: dict[str, Restored],
    ) -> Conversation:
        snap = tail.snapshots.get(cid)
        tenant = state.view.tenant_id or (snap.tenant_id if snap else "")
        prefix = self._fork_prefix(state.view, restored)
        return self.create(cid, tenant, state=state, positions=positions, prefix=prefix)

    def _restore_pending(self, cid: str) -> None:
        """Restore one pending conversation (its snapshot alone: it has no tail)."""
        snap = self.conversations.pending.pop(cid, None)
        if snap is None or self._tail is None:
            return
        tail = self._tail
        if not self.conversations.pending:
            self._tail = None
        found = restore_conversation(self.ctx.codec, tail, cid, [])
        if found is not None:
            self._create_restored(tail, cid, *found, {})

    def restore_pending(self, budget_s: float) -> int:
        """Restore pending conversations for about `budget_s` seconds (at least one); how many
        remain pending."""
        pending = self.conversations.pending
        started = time.perf_counter()
        while pending:
            self._restore_pending(next(iter(pending)))
            if time.perf_counter() - started >= budget_s:
                break
        return len(pending)

    def _dead_letter(self, refused: list[Refused]) -> None:
        """The records a restore refused, to the DLQ in one transaction (again at each restore
        that reads them, until a snapshot covers them: `convdb.original.*` tell the copies apart)."""
        if not refused:
            return
        dlq = DLQ.name(self.ctx.settings.namespace)
        letters = []
        for topic, offset, key, value, exc in refused:
            logger.error(
                "%s[%d]@%d: record refused by the restore, to the DLQ: %s", topic, self.partition, offset, exc
            )
            headers = error_headers("runner", topic, self.partition, offset, exc)
            letters.append(fit_dead_letter((dlq, key, value, headers), self.record_limit))
        self.publisher.atomic(
            lambda: [self.publisher.produce_raw(*letter) for letter in letters], step="dead-letter commit"
        )
        self.ctx.metrics.refused.labels("log").inc(len(letters))

    def _fork_prefix(
        self, view: ViewState, restored: dict[str, Restored], depth: int = 0
    ) -> tuple[Event, ...]:
        """What a fork's agent read before it began: its source's path up to the fork point."""
        fork = view.forks[-1] if len(view.forks) else None
        if not isinstance(fork, ForkEvent) or depth > 8:
            return ()
        source = restored.get(fork.source_conversation_id)
        if source is not None:
            source_view: ViewState | None = source[0].view
        else:  # restored already, or pending (restored now), or another partition's
            conv = self.conversations.get(fork.source_conversation_id)
            source_view = (
                conv.state.view if conv is not None else self._read_elsewhere(fork.source_conversation_id)
            )
        if source_view is None:
            logger.warning("fork %s: source %s not found", view.conversation_id, fork.source_conversation_id)
            return ()
        try:
            path = path_to_root(source_view, fork.source_event_id)
        except UnknownEventError:
            # The fork point is off the source's stored path (condensed away): what its agent saw.
            path = active_branch(source_view)
        return (*self._fork_prefix(source_view, restored, depth + 1), *path)

    def read_source(self, cid: str) -> tuple[ViewState, tuple[Event, ...]] | None:
        """A conversation to fork from, read (never written): its view and what its agent read
        before it began (its own fork prefix); None when no runner's partition has it."""
        conv = self.conversations.get(cid)
        if conv is not None:
            return conv.state.view, conv.loop.prefix
        view = self._read_elsewhere(cid)
        if view is None or view.last_seq == 0:
            return None
        return view, self._fork_prefix(view, {})

    def _read_elsewhere(self, cid: str) -> ViewState | None:
        """The view of a conversation of another partition, read (never written) from its snapshot."""
        partition = partition_for(cid, self.ctx.settings.partitions)
        if partition == self.partition:
            return None
        tail = restore_partition(self.ctx.settings, self.ctx.codec, self.ctx.store, partition)
        # What that partition's own restore refuses is its owner's to dead-letter, not ours.
        found = restore_conversation(self.ctx.codec, tail, cid, [])
        return found[0].view if found is not None else None

    # -- conversations ------------------------------------------------------------------------
    def create(
        self,
        cid: str,
        tenant_id: str,
        *,
        state: ConversationState | None = None,
        positions: LogPositions | None = None,
        prefix: Sequence[Event] = (),
        agent: str | None = None,
    ) -> Conversation:
        """A conversation written through this partition's transactions (new, or as restored).

        Its agent is the one its SystemPromptEvent names (a restored conversation), else `agent`
        (the first inbox record's), else the runner's default. A restored conversation whose
        agent does not load here is kept (its log is its partition's) but never run: its inbox
        records go to the DLQ with the reason (`admit`).

        Raises:
            UnknownAgentError, AgentLoadError: a new conversation's agent cannot be loaded.
        """
        rt = self.ctx.runtime
        # A snapshot keeps the visible branch (the system prompt stays in it: the condenser keeps
        # the first events) and the path after the last condensation.
        recorded = recorded_agent(
            (*prefix, *(state.view.visible if state else ()), *(state.view.path if state else ()))
        )
        name = recorded[0] if recorded else agent
        if rt.graphs is not None and rt.graphs.hosts(name):
            hosted = self._graph_conversation(cid, tenant_id, name, state, positions, prefix)
            if hosted is not None:
                return hosted
            name = None  # its graph does not load here: kept (never run) as the default agent's
        try:
            name, chosen, llm = rt.agent_for(name, recorded=recorded is not None)
        except (UnknownAgentError, AgentLoadError) as exc:
            if state is None:
                raise
            logger.error("conversation %s: its agent %r does not load here, not run: %s", cid, name, exc)
            self.unavailable[cid] = exc
            name, chosen, llm = rt.agent_name, rt.agent, rt.llm
        if recorded and recorded[1] and recorded[1] != chosen.version:
            logger.warning(
                "conversation %s started under agent %s version %s; it resumes under version %s",
                cid, name, recorded[1], chosen.version,
            )  # fmt: skip
        conv = Conversation(
            cid, tenant_id, chosen, self.sink, llm,
            runtime=self.ctx.settings.runtime, secrets=rt.secrets, crash=rt.crash,
            state=state, positions=positions, book=self, prefix=prefix, metrics=self.ctx.metrics,
            agent_name=name,
        )  # fmt: skip
        conv.effects.delegations.partitions = self.ctx.settings.partitions
        self.conversations[cid] = conv
        return conv

    def _graph_conversation(
        self,
        cid: str,
        tenant_id: str,
        name: str | None,
        state: ConversationState | None,
        positions: LogPositions | None,
        prefix: Sequence[Event] = (),
    ) -> Conversation | None:
        """A conversation run by a hosted LangGraph graph (`producers.graph_host`); None for a
        restored one whose graph does not load here (`create` keeps it, never run, as an agent's)."""
        graphs = self.ctx.runtime.graphs
        assert graphs is not None
        try:
            try:  # LangGraph is an optional extra: imported only by a runner that hosts a graph
                from convdb.producers.graph_host import GraphConversation
            except ImportError as exc:
                why = f"{exc} (is the langgraph extra installed? pip install convdb[langgraph])"
                raise AgentLoadError(f"graph {graphs.name_of(name)!r}: {why}") from exc
            conv: Conversation = GraphConversation.hosted(
                graphs,
                self,
                cid,
                tenant_id,
                graphs.name_of(name),
                state=state,
                positions=positions,
                prefix=prefix,
            )
        except (UnknownAgentError, AgentLoadError) as exc:
            if state is None:
                raise
            logger.error("conversation %s: its graph %r does not load here, not run: %s", cid, name, exc)
            self.unavailable[cid] = exc
            return None
        self.conversations[cid] = conv
        return conv

    def admit(self, record: InboxMessage | ExternalBatch) -> Conversation:
        """The conversation an inbox record is for (created by its first record).

        The one place an inbox record meets its conversation: a record of another tenant than
        the conversation's (its first record fixed it), an OpenHands payload for a conversation
        convdb runs, or a user message for one that runs in OpenHands raises a data error, which
        the runner sends to the DLQ with the record's offset.

        Raises:
            TenantMismatchError: the record names another tenant than the conversation's.
            DelegationRefusedError: a child's first record whose conversation id is taken by another
                conversation, or is not the one its parent's operation fixes.
            RecordRefusedError: the record is for a conversation run by the other side.
            UnknownAgentError, AgentLoadError: the agent it names (or its conversation runs)
                cannot be loaded here.
            AgentMismatchError: it names another agent than its conversation runs.
        """
        conv = self.conversations.get(record.conversation_id)
        agent = record.agent if isinstance(record, InboxMessage) else None
        link = link_from_inbox(record) if isinstance(record, InboxMessage) else None
        if link is not None and not is_derived_child_id(link.parent_operation_id, record.conversation_id):
            raise DelegationRefusedError(
                f"conversation {record.conversation_id} is not the child that operation "
                f"{link.parent_operation_id} of its parent fixes"
            )
        if conv is None:
            return self.create(record.conversation_id, record.tenant_id, agent=agent)
        check_owner(conv.tenant_id, record)
        if link is not None and conv.effects.delegations.link != link:
            raise DelegationRefusedError(
                f"conversation {conv.conversation_id} already exists and is not the child of "
                f"{link.parent_conversation_id}'s operation {link.parent_operation_id}: no child started"
            )
        external.refuse(conv, record)
        unavailable = self.unavailable.get(conv.conversation_id)
        if unavailable is not None and isinstance(record, InboxMessage):
            raise AgentLoadError(f"conversation {conv.conversation_id}: {unavailable}")
        if agent is not None and agent != conv.services.agent_name:
            raise AgentMismatchError(
                f"conversation {conv.conversation_id} runs agent {conv.services.agent_name!r}, "
                f"not {agent!r} (an agent is chosen by the first message)"
            )
        return conv

    def stage_external(self, batch: ExternalBatch, next_offset: int) -> tuple[Conversation, list[AvroModel]]:
        """Stage a foreign system's records in their conversation (`InboxBatch` commits them).

        Raises:
            TenantMismatchError, RecordRefusedError, ForeignRecordError: the record does not
                belong there, does not map, or maps to a record too large to write (nothing is
                staged; the runner dead-letters it).
        """
        conv = self.admit(batch)
        cid = batch.conversation_id

        def check(records: Sequence[AvroModel], mapped: Sequence[AvroModel]) -> None:
            external.check_extensions(records, mapped, f"inbox record {batch.id}")
            check_sizes(self.ctx.codec, self.record_limit, records, f"inbox record {batch.id}")

        self.external[cid], staged = external.stage(conv, self.external.get(cid), batch, check)
        conv.positions.inbox_offset = next_offset
        return conv, staged

    def before_batch_commit(self) -> None:
        """Crash point `before_inbox_commit`: the batch's records are in the log, uncommitted."""
        crash = self.ctx.runtime.crash
        if crash.point == "before_inbox_commit":
            self.publisher.producer.flush(30)
            crash.hit("before_inbox_commit")

    def interrupted(self) -> list[Conversation]:
        """Conversations whose run a crash or a handover cut short."""
        convs = self.conversations.values()
        return [c for c in convs if needs_takeover(c) and c.conversation_id not in self.unavailable]

    # -- SnapshotBook -------------------------------------------------------------------------
    def snapshot_record(self, conv: Conversation) -> Snapshot:
        """The snapshot of `conv` with the restore offsets of the whole partition after it."""
        others = [c.positions for c in self.conversations.values() if c is not conv]
        pending_events = [p.events_restore_from for p in others if p.events_restore_from is not None]
        unobserved = {a.operation_id for a in conv.unobserved_actions()}
        refold = conv.positions.refold_offset(conv.ledger, unobserved)
        pending_effects = [p.effects_restore_from for p in others if p.effects_restore_from is not None]
        if refold is not None:
            pending_effects.append(refold)
        return build_snapshot(
            conv.base_snapshot(),
            conv.state.view,
            self.ctx.codec,
            # A conversation run elsewhere restores from its first event: the OpenHands mapping
            # needs every id (retries) and every derived usage record, not just the active branch.
            keep_view=external.origin_of(conv.state.view) is None,
            effects_offset=refold if refold is not None else conv.positions.effects_position,
            partition_events_offset=min(pending_events, default=self.events_end),
            partition_effects_offset=min(pending_effects, default=self.effects_end),
        )

    def committed(self, records: Sequence[AvroModel], deliveries: Sequence[Delivery]) -> None:
        """Advance the partition's ends; save committed snapshots in the local store."""
        saved = []
        for record, delivery in zip(records, deliveries, strict=False):
            if delivery.offset < 0:
                continue
            if isinstance(record, Snapshot):
                saved.append((record.conversation_id, delivery.offset, self.ctx.codec.encode(record)))
            elif isinstance(record, InboxMessage):
                continue  # another conversation's inbox (a delegation)
            elif isinstance(record, GraphCheckpoint | GraphWrites | GraphDeleted):
                continue  # a hosted graph's records: its saver restores them from the graph topic
            elif isinstance(record, LedgerRecord):
                self.effects_end = max(self.effects_end, delivery.offset + 1)
            else:
                self.events_end = max(self.events_end, delivery.offset + 1)
        if saved:
            self.ctx.store.save(self.partition, saved, max(o for _, o, _ in saved) + 1)

    def close(self) -> None:
        """Drop the conversations and release the producer (without writing anything)."""
        self.conversations.clear()
        self._tail = None
        self.publisher.producer.purge()


def recorded_agent(events: Sequence[Event]) -> tuple[str, str | None] | None:
    """The agent name and version the first SystemPromptEvent of `events` records, if it names one."""
    for event in events:
        if isinstance(event, SystemPromptEvent):
            return (event.agent, event.agent_version) if event.agent else None
    return None


def needs_takeover(conv: Conversation) -> bool:
    """True when a run was due or under way: status running, or a user message not yet answered.

    Never for a conversation run elsewhere (OpenHands): convdb only appends what it is sent.
    """
    if external.origin_of(conv.state.view) is not None:
        return False
    if conv.status == "running":
        return True
    if conv.status in ("waiting_for_confirmation", "waiting_for_human"):
        return False
    view = conv.state.view
    leaf = view.events.get(view.active_leaf) if view.active_leaf else None
    return isinstance(leaf, MessageEvent) and leaf.role == "user"
