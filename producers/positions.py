"""Where a conversation's records are in the log, and what a restore must read of them again.

The offsets say where a restore of the partition must start reading for this conversation: the
events after its last snapshot, and the ledger records of operations still open (refolded from
their proposal).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from convdb.infra.producer import Delivery
from convdb.producers.ledger import Ledger, open_operations
from convdb.producers.state import ConversationState
from convdb.schemas import AvroModel, EffectProposed, EventEnvelope, LedgerRecord, Snapshot


@dataclass
class LogPositions:
    """One conversation's log positions (mutated as its records become durable)."""

    events_position: tuple[int, int] = (-1, -1)
    """(partition, offset after the conversation's last event); (-1, -1) before any."""
    first_events_offset: int = -1
    events_restore_from: int | None = None
    """Offset of the first event no snapshot covers (None: all covered)."""
    events_since_snapshot: int = 0
    effects_position: int = -1
    """Effects offset after this conversation's last ledger record (-1: none seen)."""
    effects_restore_from: int | None = None
    """Effects offset from which a restore must fold this conversation's ledger (None: nothing open)."""
    proposal_offsets: dict[str, int] = field(default_factory=dict)
    inbox_offset: int = -1
    """Next inbox offset of the message being handled (recorded in snapshots)."""

    def track(
        self, records: Sequence[AvroModel], deliveries: Sequence[Delivery], refold: Callable[[], int | None]
    ) -> None:
        """Records are durable at these positions; `refold` says where a snapshot's ledger refold starts."""
        for record, delivery in zip(records, deliveries, strict=False):
            if delivery.offset < 0:
                continue
            if isinstance(record, EventEnvelope):
                self.events_position = (delivery.partition, delivery.offset + 1)
                if self.first_events_offset < 0:
                    self.first_events_offset = delivery.offset
                if self.events_restore_from is None:
                    self.events_restore_from = delivery.offset
                self.events_since_snapshot += 1
            elif isinstance(record, LedgerRecord):
                self.effects_position = delivery.offset + 1
                if self.effects_restore_from is None:
                    self.effects_restore_from = delivery.offset
                if isinstance(record, EffectProposed):
                    self.proposal_offsets[record.operation_id] = delivery.offset
            elif isinstance(record, Snapshot):
                self.events_since_snapshot = 0
                self.events_restore_from = None
                self.effects_restore_from = refold()

    def read_back(self, offset: int, record: LedgerRecord) -> None:
        """A ledger record a restore read at `offset`."""
        self.effects_position = max(self.effects_position, offset + 1)
        if isinstance(record, EffectProposed):
            self.proposal_offsets[record.operation_id] = offset

    def refold_offset(self, ledger: Ledger, unobserved: set[str]) -> int | None:
        """Effects offset a restore must fold from: the oldest proposal of an operation still open
        (or of an action still unobserved)."""
        ops = {k for k, v in ledger.items() if v.is_open or k in unobserved}
        if not ops:
            return None
        known = [self.proposal_offsets[o] for o in ops if o in self.proposal_offsets]
        if len(known) < len(ops):
            return self.effects_restore_from if self.effects_restore_from is not None else 0
        return min(known)


def base_snapshot(
    conversation_id: str,
    tenant_id: str,
    state: ConversationState,
    positions: LogPositions,
    *,
    agent_json: str,
    stats_json: str,
    secret_names: tuple[str, ...],
) -> Snapshot:
    """A conversation's base state: status, stats, secret names, open operations, positions, cost."""
    view = state.view
    partition, offset = positions.events_position
    return Snapshot(
        conversation_id=conversation_id,
        tenant_id=tenant_id,
        timestamp=datetime.now(UTC),
        last_seq=view.last_seq,
        last_event_id=view.log[-1].id if len(view.log) else None,
        active_leaf_id=view.active_leaf,
        events_partition=partition,
        events_offset=offset,
        execution_status=state.status,
        agent_json=agent_json,
        stats_json=stats_json,
        secret_names=secret_names,
        inbox_offset=positions.inbox_offset,
        open_operations=tuple(open_operations(state.ledger)),
        first_events_offset=positions.first_events_offset,
        total_cost=state.cost,
    )
