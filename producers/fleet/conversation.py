"""A Conversation owned by a fleet runner: it tracks its offsets and snapshots every K events.

The offsets say where a restore must start reading for this conversation: the events after its
last snapshot, and the ledger records of operations still open (refolded from their proposal).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from producers.conversation import Conversation
from producers.ledger import fold_ledger
from producers.publisher import Delivery
from schemas import AvroModel, EffectProposed, EventEnvelope, LedgerRecord, LLMUsageEvent, Snapshot


class PartitionBook(Protocol):
    """What a fleet conversation asks of the partition that owns it."""

    def snapshot_record(self, conv: FleetConversation) -> Snapshot:
        """The snapshot of `conv`, with the partition's restore offsets."""
        ...

    def committed(
        self, conv: FleetConversation, records: Sequence[AvroModel], deliveries: list[Delivery]
    ) -> None:
        """Records of `conv` are durable at these positions."""
        ...


class FleetConversation(Conversation):
    """A Conversation that knows its log positions and takes snapshots every K events."""

    def __init__(self, *args: Any, book: PartitionBook, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.book = book
        self.events_since_snapshot = 0
        self.first_events_offset = -1
        self.events_restore_from: int | None = None
        """Offset of the first event no snapshot covers (None: all covered)."""
        self.effects_position = -1
        """Effects offset after this conversation's last ledger record (-1: none seen)."""
        self.effects_restore_from: int | None = None
        """Effects offset from which a restore must fold this conversation's ledger (None: nothing open)."""
        self.proposal_offsets: dict[str, int] = {}
        self.cost_base = 0.0
        self.cost_seq = 0

    def commit(self, build: Callable[[], Sequence[AvroModel]]) -> list[AvroModel]:
        """Commit as usual, then record positions and snapshot once K events are uncovered."""
        with self._lock:
            records = super().commit(build)
            self._track(records, getattr(self.sink, "last_deliveries", []))
            if self.events_since_snapshot >= self.runtime.snapshot_every and not any(
                isinstance(r, Snapshot) for r in records
            ):
                self.snapshot()
            return records

    def snapshot(self) -> Snapshot:
        """Publish the full snapshot (base state, view, offsets) to the state topic."""
        return self.commit(lambda: [self.book.snapshot_record(self)])[0]  # type: ignore[return-value]

    def total_cost(self) -> float:
        """LLM cost of the whole conversation (events before a restored snapshot included)."""
        tail = sum(
            e.cost or 0.0 for e in self.state.log if isinstance(e, LLMUsageEvent) and e.seq > self.cost_seq
        )
        return self.cost_base + tail

    def book_ledger(self, offset: int, record: LedgerRecord) -> None:
        """Fold a ledger record read back at `offset` (restore)."""
        self.ledger = fold_ledger(self.ledger, record)
        self.effects_position = max(self.effects_position, offset + 1)
        if isinstance(record, EffectProposed):
            self.proposal_offsets[record.operation_id] = offset

    def refold_offset(self) -> int | None:
        """Effects offset a restore must fold from: the oldest proposal of an operation still open."""
        observed = {a.operation_id for a in self.unobserved_actions()}
        ops = {k for k, v in self.ledger.items() if v.is_open or k in observed}
        if not ops:
            return None
        known = [self.proposal_offsets[o] for o in ops if o in self.proposal_offsets]
        if len(known) < len(ops):
            return self.effects_restore_from if self.effects_restore_from is not None else 0
        return min(known)

    def _track(self, records: Sequence[AvroModel], deliveries: list[Delivery]) -> None:
        for record, delivery in zip(records, deliveries, strict=False):
            if delivery.offset < 0:
                continue
            if isinstance(record, EventEnvelope):
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
                self.effects_restore_from = self.refold_offset()
        self.book.committed(self, records, deliveries)
