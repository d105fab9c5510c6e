"""How a fleet runner takes its inbox records: checked, staged or run, or dead-lettered.

A service survives any record on its input topics: every failure of one inbox record (it does
not decode, sits on another partition than its key maps to, names another tenant, maps to an
event too large to write, or its handling raises what nobody foresaw) sends that record to the
DLQ with the reason and a count, and the partition goes on. Only the broker's failures are
retried (`FleetRunner._guarded`). A failure that surfaces only when a batch commits is traced to
its record by committing that batch's records one by one when they come again (`careful`), and
the record then dead-lettered (`faults`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from confluent_kafka import Message

from convdb.infra import tracing
from convdb.infra.dlq import error_headers
from convdb.infra.limits import HEADROOM, record_limit
from convdb.infra.logs import log_context
from convdb.infra.partitioner import partition_for
from convdb.infra.records import coordinates
from convdb.producers.delegation import link_from_inbox, report
from convdb.producers.errors import (
    AgentLoadError,
    AgentMismatchError,
    HistoryCommandError,
    MisplacedRecordError,
    RecordFailedError,
    RecordTooLargeError,
    UnknownAgentError,
)
from convdb.producers.fleet.batch import InboxBatch
from convdb.producers.fleet.history import admit_command
from convdb.producers.fleet.limits import fit_dead_letter, record_fault, too_large
from convdb.producers.fleet.owner import FleetContext, PartitionOwner
from convdb.producers.inbox import apply_inbox
from convdb.producers.publisher import RawRecord
from convdb.projections.errors import TenantMismatchError
from convdb.schemas import ExternalBatch, InboxMessage
from convdb.schemas.errors import ConvdbError, SchemaError
from convdb.schemas.topics import DLQ, INBOX
from convdb.schemas.validation import shown

logger = logging.getLogger(__name__)

HISTORY = frozenset({"branch", "fork"})
"""Commands that change a conversation's history, checked by `history.admit_command` first."""


class Intake:
    """The inbox records of the partitions a runner owns (`owners`, shared with the runner)."""

    def __init__(
        self,
        ctx: FleetContext,
        owners: dict[int, PartitionOwner],
        emit: Callable[..., None],
        touch: Callable[[], None],
    ) -> None:
        self.ctx = ctx
        self.owners = owners
        self.emit = emit
        self.touch = touch
        """Called whenever a record was worked on (the runner's idle clock)."""
        self.inbox = INBOX.name(ctx.settings.namespace)
        self.faults: dict[tuple[int, int], ConvdbError] = {}
        """(partition, inbox offset) -> why the record failed there: dead-lettered when it comes again."""
        self.careful: dict[int, int] = {}
        """Partition -> inbox offset up to which its records commit one by one (after a failed batch)."""
        self.handled = 0
        self.refused = 0
        """Inbox records dead-lettered (another tenant's, misplaced, invalid, too large, failing)."""

    def forget(self, keep: set[int]) -> None:
        """Drop what is remembered of partitions not in `keep` (their next owner finds out itself)."""
        self.faults = {at: f for at, f in self.faults.items() if at[0] in keep}
        self.careful = {p: o for p, o in self.careful.items() if p in keep}

    def handle_partition(
        self,
        partition: int,
        msgs: list[Message],
        between: Callable[[], bool] = lambda: True,
        turn_over: Callable[[], bool] = lambda: False,
    ) -> list[Message]:
        """Stage OpenHands payloads and dead letters; a user message or command commits what is
        staged, then runs on its own (`handle`); the rest commits at the end, in one transaction.

        `between` is called after each run (the runner serves its rebalance callbacks there); when
        it answers False the partition is no longer ours as it was, and the rest is left to be
        read again from the committed offset. After each run `turn_over` says whether other
        partitions' records wait: then the records not handled yet are returned (nothing of them
        is staged), for the runner to handle after theirs; else every record is handled and the
        list is empty.

        After a commit failed for a record's own fault (`limits.record_fault`), the records of
        that batch commit one by one (`careful`), so the next failure names its record, which is
        then dead-lettered (`faults`) when it comes again.
        """
        batch = InboxBatch(self.owners[partition])
        for i, msg in enumerate(msgs):
            self.touch()
            record = self._stage(batch, msg)
            if record is not None:
                self._commit(batch)
                self._run(msg, record)
                if not between():
                    return []
                if i + 1 < len(msgs) and turn_over():
                    return msgs[i + 1 :]
            elif self.careful.get(partition, -1) >= coordinates(msg)[2]:
                self._commit(batch)
        self._commit(batch)
        if msgs and self.careful.get(partition, -1) <= coordinates(msgs[-1])[2]:
            self.careful.pop(partition, None)
        return []

    def _stage(self, batch: InboxBatch, msg: Message) -> InboxMessage | None:
        """Stage an OpenHands payload or a dead letter in `batch`; a user message or command to run."""
        _, partition, offset = coordinates(msg)
        fault = self.faults.pop((partition, offset), None)
        if fault is not None:
            # Refused by the broker as too large, its dead letter may be too: it goes without value.
            bare = isinstance(fault, RecordTooLargeError)
            batch.dead_letter(self._dead_letter(msg, fault, bare=bare), offset + 1)
            return None
        try:
            record = self._decode(msg)
            if isinstance(record, InboxMessage):
                return record
            with (
                log_context(conversation_id=record.conversation_id, tenant_id=record.tenant_id),
                tracing.traced_or_root(msg.headers(), "runner external", **tracing.record_attributes(msg)),
            ):
                batch.external(record, offset + 1)
        except ConvdbError as exc:
            batch.dead_letter(self._dead_letter(msg, exc), offset + 1)
        except Exception as exc:  # noqa: BLE001 - staging changes nothing until it succeeds
            fault = self._fault(partition, offset, exc)
            batch.dead_letter(self._dead_letter(msg, fault), offset + 1)
        return None

    def _decode(self, msg: Message) -> InboxMessage | ExternalBatch:
        """The inbox record, if it sits where its conversation's runner reads it and fits.

        Raises:
            MisplacedRecordError: keyed by another id than its conversation's, or on another
                partition than its key maps to (its conversation's runner is elsewhere).
            RecordTooLargeError: a user message too large for the event it becomes.
            SchemaError: it does not decode to an inbox record.
        """
        topic, partition, offset = coordinates(msg)
        where = f"{topic}[{partition}]@{offset}"
        key = (msg.key() or b"").decode(errors="replace")
        home = partition_for(key, self.ctx.settings.partitions)
        if home != partition:
            raise MisplacedRecordError(
                f"{where}: key {shown(key)} maps to partition {home}, not {partition} (was it "
                "produced with another partitioner than murmur2_random?)"
            )
        record = self.ctx.codec.decode(msg.value() or b"", expect=(InboxMessage, ExternalBatch))
        if not isinstance(record, (InboxMessage, ExternalBatch)):
            raise SchemaError(f"{where}: expected an inbox record, got {type(record).__name__}")
        if record.conversation_id != key:
            raise MisplacedRecordError(
                f"{where}: keyed {shown(key)}, but its conversation is {shown(record.conversation_id)}"
            )
        size = len(msg.value() or b"") + HEADROOM
        if isinstance(record, InboxMessage) and size > self.owners[partition].record_limit:
            raise RecordTooLargeError(
                f"{where}: a {size}-byte message does not fit in an event the runner may write "
                f"(at most {self.owners[partition].record_limit} bytes)"
            )
        return record

    def _commit(self, batch: InboxBatch) -> None:
        """Commit the batch; when that fails for a record's own fault, remember which record (or,
        in a batch of several, that its records must commit one by one when they come again)."""
        first, end = batch.first_offset, batch.next_offset
        try:
            self._handled(batch.commit())
        except Exception as exc:
            if first is not None and end is not None and record_fault(exc):
                partition = batch.owner.partition
                if end - first == 1:
                    self.faults[(partition, first)] = self._fault(partition, first, exc)
                else:
                    self.careful[partition] = end - 1
            raise

    def _run(self, msg: Message, record: InboxMessage) -> None:
        """`handle`, remembering a failure that is the record's own fault for when it comes again."""
        try:
            self.handle(msg, record)
        except Exception as exc:
            if record_fault(exc):
                _, partition, offset = coordinates(msg)
                self.faults[(partition, offset)] = self._fault(partition, offset, exc)
            raise

    def _fault(self, partition: int, offset: int, exc: BaseException) -> ConvdbError:
        """The data error a failure of one inbox record stands for (the reason its dead letter gives)."""
        where = f"{self.inbox}[{partition}]@{offset}"
        if too_large(exc):
            return RecordTooLargeError(f"{where}: the broker refused what it makes as too large: {exc}")
        return RecordFailedError(f"{where}: handling it raised {type(exc).__name__}: {str(exc)[:500]}")

    def _handled(self, applied: int) -> None:
        if applied:
            self.ctx.metrics.inbox.inc(applied)
            self.handled += applied
            self.touch()

    def handle(self, msg: Message, record: InboxMessage) -> None:
        """Apply one user message or command; its offset commits with the first transaction it causes.

        A record that its conversation refuses (`PartitionOwner.admit`) goes to the DLQ with its
        offset: one transaction, so it is dead-lettered exactly once.
        """
        _, partition, offset = coordinates(msg)
        owner = self.owners[partition]
        try:
            conv = admit_command(owner, record) if record.command in HISTORY else owner.admit(record)
        except ConvdbError as exc:
            owner.sink.attach_offset(offset + 1)
            owner.sink.dead_letter(*self._dead_letter(msg, exc), also=self._rejection(record, exc))
            return
        conv.positions.inbox_offset = offset + 1
        owner.sink.attach_offset(offset + 1, record.id if record.command == "message" else None)
        self.ctx.metrics.inbox.inc()
        # The inbox record's trace (the API request that wrote it) continues through the run; a
        # record without one (`convdb run`, an import) starts its own trace here.
        with (
            log_context(conversation_id=record.conversation_id, tenant_id=record.tenant_id),
            tracing.traced_or_root(msg.headers(), "runner inbox", **tracing.record_attributes(msg)),
        ):
            hosted = getattr(conv, "handle_inbox", None)  # a LangGraph graph's thread (graph_host)
            if hosted is not None:
                hosted(record)
            else:
                apply_inbox(conv, record, self.ctx.runtime.crash)
        owner.sink.commit_offset()
        self.handled += 1
        self.touch()

    def _rejection(self, record: InboxMessage, exc: ConvdbError) -> list[RawRecord]:
        """A refused child's first record, reported to its parent as `rejected` (with the dead
        letter, in one transaction): a parent never waits for a child that was never started."""
        link = link_from_inbox(record)
        if link is None:
            return []
        rejected = report(
            record.conversation_id, record.tenant_id, link, "rejected", f"{type(exc).__name__}: {exc}",
            report_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{record.id}#rejected")),
        )  # fmt: skip
        key = link.parent_conversation_id.encode()
        return [(self.inbox, key, self.ctx.codec.encode(rejected), [])]

    def _dead_letter(self, msg: Message, exc: ConvdbError, *, bare: bool = False) -> RawRecord:
        """Count and log a refused inbox record; its dead letter (DLQ topic, key, value, headers),
        without the value when `bare` or when it would not fit (`limits.fit_dead_letter`)."""
        topic, partition, offset = coordinates(msg)
        logger.error("%s[%d]@%d: inbox record to the DLQ: %s", topic, partition, offset, exc)
        # Visible to operators and tests: a record refused (a cross-tenant write attempt, ...).
        self.refused += 1
        self.emit(
            "refused",
            partition=partition,
            offset=offset,
            error=type(exc).__name__,
            reason=str(exc),
        )
        self.ctx.metrics.refused.labels(refusal_reason(exc)).inc()
        headers = error_headers("runner", topic, partition, offset, exc)
        record = (DLQ.name(self.ctx.settings.namespace), msg.key(), msg.value() or b"", headers)
        return fit_dead_letter(record, 0 if bare else record_limit(self.ctx.settings))


def refusal_reason(exc: BaseException) -> str:
    """The `reason` label of `convdb_runner_refused_records` for a refused inbox record."""
    if isinstance(exc, TenantMismatchError):
        return "tenant"
    if isinstance(exc, MisplacedRecordError):
        return "partition"
    if isinstance(exc, RecordTooLargeError):
        return "too_large"
    if isinstance(exc, HistoryCommandError):
        return "history"
    if isinstance(exc, AgentLoadError | AgentMismatchError | UnknownAgentError):
        return "agent"
    return "failed" if isinstance(exc, RecordFailedError) else "invalid"
