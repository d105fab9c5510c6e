"""One owned partition: its transactional writer, its conversations, their restore and snapshots.

Creating an owner calls `init_transactions` for ``{namespace}.runner.{partition}``, which fences
any older writer of the partition (a zombie runner) before anything is read or written.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer

from infra.settings import Settings
from producers import _records as rec
from producers.fleet.conversation import FleetConversation
from producers.fleet.restore import PartitionTail, restore_partition
from producers.fleet.sink import PartitionSink
from producers.fleet.snapshot import build_snapshot, view_from_snapshot
from producers.fleet.store import SnapshotStore
from producers.publisher import Delivery, TransactionalPublisher
from producers.runtime import Runtime, last_status
from projections.errors import ProjectionError
from projections.view import fold_all, initial
from schemas import AvroModel, Codec, Event, LedgerRecord, MessageEvent, Snapshot
from schemas.errors import SchemaError
from schemas.topics import INBOX

logger = logging.getLogger(__name__)


@dataclass
class FleetContext:
    """What every owned partition of a runner shares."""

    settings: Settings
    runtime: Runtime
    store: SnapshotStore

    @property
    def codec(self) -> Codec:
        """The record codec."""
        return self.runtime.codec


def transactional_id(settings: Settings, partition: int) -> str:
    """The transactional id of a partition's writer: one per partition, whoever owns it."""
    return f"{settings.namespace}.runner.{partition}"


class PartitionOwner:
    """The single writer of one partition's conversations."""

    def __init__(self, ctx: FleetContext, partition: int, consumer: Consumer | None) -> None:
        self.ctx = ctx
        self.partition = partition
        self.transactional_id = transactional_id(ctx.settings, partition)
        self.publisher = TransactionalPublisher(ctx.settings, ctx.codec, self.transactional_id)
        self.sink = PartitionSink(self.publisher, consumer, INBOX.name(ctx.settings.namespace), partition)
        self.conversations: dict[str, FleetConversation] = {}
        self.events_end = 0
        self.effects_end = 0
        self.report: dict[str, object] = {}

    # -- restore ------------------------------------------------------------------------
    def restore(self) -> dict[str, object]:
        """Rebuild every conversation of the partition from snapshots and tails."""
        tail = restore_partition(self.ctx.settings, self.ctx.codec, self.ctx.store, self.partition)
        self.events_end, self.effects_end = tail.events_end, tail.effects_end
        for cid in {*tail.snapshots, *tail.events}:
            self.conversations[cid] = self._rebuild(cid, tail)
        self.report = {
            "partition": self.partition,
            "source": tail.source,
            "conversations": len(self.conversations),
            "state_read": tail.state_read,
            "events_read": tail.events_read,
            "effects_read": tail.effects_read,
            "tail_events": {cid: len(v) for cid, v in tail.events.items()},
            "ms": round(tail.seconds * 1000, 2),
        }
        return self.report

    def _rebuild(self, cid: str, tail: PartitionTail) -> FleetConversation:
        snap = tail.snapshots.get(cid)
        raw = tail.events.get(cid, [])
        events: list[Event] = [self.ctx.codec.decode(b) for _, b in raw]  # type: ignore[misc]
        ledger: list[tuple[int, LedgerRecord]] = []
        for offset, data in tail.ledger.get(cid, []):
            try:
                ledger.append((offset, self.ctx.codec.decode(data)))  # type: ignore[arg-type]
            except SchemaError as exc:
                logger.error(
                    "partition %d: skipped undecodable ledger record @%d: %s", self.partition, offset, exc
                )
        state = view_from_snapshot(snap, self.ctx.codec) if snap and snap.view_complete else initial(cid)
        try:
            state = fold_all(state, events)
        except ProjectionError as exc:
            raise ProjectionError(f"restore of {cid} in partition {self.partition}: {exc}") from exc
        conv = self.create(cid, state.tenant_id or (snap.tenant_id if snap else ""))
        conv.state = state
        conv._seq, conv._leaf = state.last_seq, state.active_leaf  # noqa: SLF001 - restored position
        conv.status = (
            last_status(events)
            if any(e.kind == "state_update" for e in events)
            else (snap.execution_status if snap else "idle")
        )
        for offset, record in ledger:
            conv.book_ledger(offset, record)
        if snap is not None:
            conv.first_events_offset = snap.first_events_offset
            conv.cost_base, conv.cost_seq = snap.total_cost, snap.last_seq
            conv.events_position = (self.partition, snap.events_offset)
        if raw:
            conv.first_events_offset = conv.first_events_offset if snap else raw[0][0]
            conv.events_restore_from = raw[0][0]
            conv.events_position = (self.partition, raw[-1][0] + 1)
            conv.events_since_snapshot = len(raw)
        # Everything read is needed again by the next restore until a snapshot covers it.
        conv.effects_restore_from = ledger[0][0] if ledger else None
        return conv

    # -- conversations ------------------------------------------------------------------------
    def create(self, cid: str, tenant_id: str) -> FleetConversation:
        """A new conversation written through this partition's transactions."""
        rt = self.ctx.runtime
        conv = FleetConversation(
            cid,
            tenant_id,
            rt.agent,
            self.sink,
            rt.llm,
            runtime=self.ctx.settings.runtime,
            secrets=rt.secrets,
            crash=rt.crash,
            book=self,
        )
        self.conversations[cid] = conv
        return conv

    def interrupted(self) -> list[FleetConversation]:
        """Conversations whose run a crash or a handover cut short."""
        return [c for c in self.conversations.values() if needs_takeover(c)]

    # -- PartitionBook ---------------------------------------------------------------------
    def snapshot_record(self, conv: FleetConversation) -> Snapshot:
        """The snapshot of `conv` with the restore offsets of the whole partition after it."""
        others = [c for c in self.conversations.values() if c is not conv]
        pending_events = [c.events_restore_from for c in others if c.events_restore_from is not None]
        refold = conv.refold_offset()
        pending_effects = [c.effects_restore_from for c in others if c.effects_restore_from is not None]
        if refold is not None:
            pending_effects.append(refold)
        return build_snapshot(
            conv,
            rec.snapshot(conv),
            self.ctx.codec,
            effects_offset=refold if refold is not None else conv.effects_position,
            partition_events_offset=min(pending_events, default=self.events_end),
            partition_effects_offset=min(pending_effects, default=self.effects_end),
        )

    def committed(
        self,
        conv: FleetConversation,  # noqa: ARG002 - part of the PartitionBook port
        records: Sequence[AvroModel],
        deliveries: list[Delivery],
    ) -> None:
        """Advance the partition's ends; save committed snapshots in the local store."""
        saved = []
        for record, delivery in zip(records, deliveries, strict=False):
            if delivery.offset < 0:
                continue
            if isinstance(record, Snapshot):
                saved.append((record.conversation_id, delivery.offset, self.ctx.codec.encode(record)))
            elif isinstance(record, LedgerRecord):
                self.effects_end = max(self.effects_end, delivery.offset + 1)
            else:
                self.events_end = max(self.events_end, delivery.offset + 1)
        if saved:
            self.ctx.store.save(self.partition, saved, max(o for _, o, _ in saved) + 1)

    def close(self) -> None:
        """Drop the conversations and release the producer (without writing anything)."""
        self.conversations.clear()
        self.publisher.producer.purge()


def needs_takeover(conv: FleetConversation) -> bool:
    """True when a run was due or under way: status running, or a user message not yet answered."""
    if conv.status == "running":
        return True
    if conv.status in ("waiting_for_confirmation", "waiting_for_human"):
        return False
    leaf = conv.state.events.get(conv.state.active_leaf) if conv.state.active_leaf else None
    return isinstance(leaf, MessageEvent) and leaf.role == "user"
