"""One batch of decoded records as every projector of a runner sees it, with the work they share."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

from sqlalchemy.engine import Connection

from convdb.consumers._rows import payload_of
from convdb.consumers.store import log_position, write_payloads
from convdb.schemas import AvroModel, EventEnvelope
from convdb.schemas.events import EVENT_TYPES

_EVENT_CLASSES = frozenset(EVENT_TYPES)


class ConsumedRecord(NamedTuple):
    """One decoded record with its Kafka coordinates.

    A NamedTuple: one is built per consumed record, and a frozen dataclass's `__init__` (a
    `object.__setattr__` per field) cost ~5x more, a visible part of the consuming thread's time.
    Compared and collected by identity (`id()`) where it matters, never by value.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: str
    value: AvroModel
    data: bytes | None = None
    """The record's Avro single-object encoding when the reader had it (payload columns store
    it as is); None when it must be encoded (another framing, or a record built in memory)."""


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record a projector refused (seq gap, unknown parent, illegal transition), with why.

    The projector wrote nothing of it; the runner sends it to the DLQ in the same store
    transaction that stores the offsets skipping it.
    """

    record: ConsumedRecord
    error: Exception


class Batch(Sequence[ConsumedRecord]):
    """Records in log order, plus the per-batch work several projectors need, done once.

    The runner hands one `Batch` to every projector it hosts, so grouping by conversation and
    the payloads of records that came without their bytes are computed once per batch (not
    per projector, and not through module-level memos), and each payload is written to the
    store once (`store_payloads`). A batch derived from it (`without`, `keep`) shares the
    encoded payloads, not what was written: a derived batch may follow a rolled-back savepoint.
    """

    __slots__ = ("records", "_events", "_groups", "_payloads", "_stored")

    def __init__(self, records: Sequence[ConsumedRecord], _payloads: dict[int, bytes] | None = None) -> None:
        self.records = records
        self._events: Batch | bool | None = None
        """The events-only batch; True when that is this batch (a reference to itself would make
        a cycle, which only the cyclic collector frees: every batch's records would outlive it)."""
        self._groups: dict[str, list[ConsumedRecord]] | None = None
        self._payloads: dict[int, bytes] = {} if _payloads is None else _payloads
        self._stored: set[int] | bool = False
        """`id()` of the records whose payload this batch wrote to the store; True: all its events'."""

    @classmethod
    def of(cls, records: Sequence[ConsumedRecord]) -> Batch:
        """`records` as a batch (itself when it is one already)."""
        return records if isinstance(records, Batch) else cls(records)

    def __len__(self) -> int:
        return len(self.records)

    @overload
    def __getitem__(self, index: int) -> ConsumedRecord: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[ConsumedRecord]: ...
    def __getitem__(self, index: int | slice) -> ConsumedRecord | Sequence[ConsumedRecord]:
        return self.records[index]

    def __iter__(self) -> Iterator[ConsumedRecord]:
        return iter(self.records)

    def events(self) -> Batch:
        """The records holding conversation events (the events topic); `self` when all do."""
        if self._events is True:
            return self
        if self._events is None:
            # An exact-class set lookup first: isinstance on pydantic models goes through ABCMeta (slow).
            kept = [
                r
                for r in self.records
                if r.value.__class__ in _EVENT_CLASSES or isinstance(r.value, EventEnvelope)
            ]
            if len(kept) == len(self.records):
                self._events = True
                return self
            self._events = self.keep(kept)
        return self._events  # type: ignore[return-value]

    def by_conversation(self) -> Mapping[str, list[ConsumedRecord]]:
        """Event records grouped by conversation, in log order within each (do not mutate)."""
        if self._groups is None:
            groups: dict[str, list[ConsumedRecord]] = {}
            for record in self.events():
                conv = record.value.conversation_id
                group = groups.get(conv)
                if group is None:
                    groups[conv] = [record]
                else:
                    group.append(record)
            self._groups = groups
        return self._groups

    def payload(self, record: ConsumedRecord) -> bytes:
        """The record as payload columns store it: its single-object Avro bytes (encoded once if needed)."""
        data = record.data
        if data is None:
            data = self._payloads.get(id(record.value))
            if data is None:
                data = self._payloads[id(record.value)] = payload_of(record.value)
        return data

    def store_payloads(self, connection: Connection, records: Sequence[ConsumedRecord]) -> None:
        """Write the payloads of `records` (in the caller's transaction) that this batch has not yet
        written: the first projector that shows an event writes it, the others find it written.

        `records` are distinct records of this batch; when they are all its events (the usual
        case), later calls cost nothing.
        """
        if self._stored is True:
            return
        if not self._stored and len(records) == len(self.events()):
            todo: Sequence[ConsumedRecord] = records
            self._stored = True
        else:
            stored = self._stored if isinstance(self._stored, set) else set()
            self._stored = stored
            todo = [r for r in records if id(r) not in stored]
            stored.update(id(r) for r in todo)
        if todo:
            payload = self.payload
            write_payloads(connection, [(log_position(r.partition, r.offset), payload(r)) for r in todo])

    def keep(self, records: Sequence[ConsumedRecord]) -> Batch:
        """A batch of some of these records (sharing the per-batch work that does not depend on which)."""
        return Batch(records, self._payloads)

    def without(self, rejected: Iterable[Rejection]) -> Batch:
        """This batch minus the rejected records; `self` when nothing is removed."""
        gone = {id(r.record) for r in rejected}
        kept = [r for r in self.records if id(r) not in gone]
        return self if len(kept) == len(self.records) else self.keep(kept)
