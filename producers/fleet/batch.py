"""Several inbox records of one partition appended in one transaction (DESIGN §6, Inbox).

Each inbox record used to cost a transaction of its own, and the commit round trips, not the
mapping, bounded how fast a runner appended (OpenHands webhook batches above all). The runner
now stages what the consumer already holds: OpenHands payloads are mapped and folded into their
conversations in inbox order, poison records become dead letters; then one transaction writes
every staged record, every dead letter and the inbox offset after the last of them.

Exactly once holds for the batch as a whole: a crash or a failed commit before the end leaves
nothing of it visible, and the partition is redelivered from its committed offset (the
conversations staged ahead of the log are rebuilt from it). A poison record never aborts the
others: it is refused before anything of it is staged, so it only adds its dead letter.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from convdb.producers.conversation import Conversation
from convdb.producers.fleet.owner import PartitionOwner
from convdb.producers.publisher import RawRecord
from convdb.producers.sink import topic_of
from convdb.schemas import AvroModel, ExternalBatch


@dataclass
class InboxBatch:
    """What a partition's inbox records staged since its last transaction."""

    owner: PartitionOwner
    staged: list[tuple[Conversation, list[AvroModel]]] = field(default_factory=list)
    dead: list[RawRecord] = field(default_factory=list)
    next_offset: int | None = None
    first_offset: int | None = None
    """Inbox offset of the batch's first record (None while it holds none)."""
    applied: int = 0
    """Foreign payloads in the batch (dead letters are not counted)."""

    def external(self, batch: ExternalBatch, next_offset: int) -> None:
        """Map a foreign system's records onto their conversation (see `PartitionOwner.stage_external`)."""
        conv, staged = self.owner.stage_external(batch, next_offset)
        if staged:
            self.staged.append((conv, staged))
        self._took(next_offset)
        self.applied += 1

    def dead_letter(self, record: RawRecord, next_offset: int) -> None:
        """Send an inbox record to the DLQ with the batch."""
        self.dead.append(record)
        self._took(next_offset)

    def _took(self, next_offset: int) -> None:
        if self.first_offset is None:
            self.first_offset = next_offset - 1
        self.next_offset = next_offset

    def commit(self) -> int:
        """One transaction for everything staged and the inbox offset; the foreign payloads it held.

        Raises:
            FencedError, PublishError: nothing of the batch was committed (the staged
                conversations are ahead of the log: the runner drops or rebuilds the partition).
                Any other error (a record the codec or the broker refuses) leaves it the same way.
        """
        if self.next_offset is None:
            return 0
        records = [(topic_of(r), r) for _, staged in self.staged for r in staged]
        deliveries = self.owner.sink.write_batch(
            records, self.dead, self.next_offset, self.owner.before_batch_commit
        )
        at = 0
        for conv, staged in self.staged:
            conv.durable(staged, deliveries[at : at + len(staged)])
            at += len(staged)
        # Snapshots after every conversation of the batch knows its positions: a snapshot records
        # where the partition's restore starts, which depends on all of them.
        for conv in {id(c): c for c, _ in self.staged}.values():
            conv.snapshot_if_due()
        applied = self.applied
        self.staged, self.dead, self.next_offset, self.first_offset, self.applied = [], [], None, None, 0
        return applied
