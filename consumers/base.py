"""The consumer plugin contract, and the base most table-backed projections are built on.

A *projector* is a consumer plugin that folds decoded records into store tables with a pure
projection from `projections/`. The live runner, `convdb replay` (Kafka or archive) and
`convdb audit` all drive the same methods, so a replay is the live code path. Plugins are
registered under the `convdb.consumers` entry-point group (name -> class).

`Projector` is the contract a third party may implement directly. `TableProjector` gives it
for declared tables (create, drop, digests, a no-op `after_commit`), and
`ConversationProjector` adds `apply` for a projection folded per conversation: a new one
declares its table, its fold and its row mapping, nothing else.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from convdb.consumers._batch import Batch, ConsumedRecord, Rejection
from convdb.consumers.store import upsert
from convdb.infra.settings import Settings
from convdb.schemas.topics import EVENTS, Topic

__all__ = [
    "Batch",
    "Change",
    "ConsumedRecord",
    "ConversationProjector",
    "DigestOf",
    "Fold",
    "Projector",
    "Rejection",
    "TableProjector",
    "fold_records",
    "load_rows",
]

S = TypeVar("S")

CHUNK = 500
"""Keys per `IN (...)` query when loading stored rows."""


class Projector(Protocol):
    """A consumer whose output is rows in a store, written with the consumed offsets."""

    name: str
    """Plugin name, e.g. 'views'; the consumer group is '<namespace>.<name>'."""

    topics: tuple[Topic, ...]
    """Registry topics it consumes."""

    version: int
    """Version of its table layout; a change means 'drop and rebuild by replay'."""

    def create(self, connection: Connection) -> None:
        """Create its tables (idempotent), inside the caller's transaction."""
        ...

    def drop(self, connection: Connection) -> None:
        """Drop its tables (before a rebuild), inside the caller's transaction."""
        ...

    def apply(self, connection: Connection, batch: Batch) -> Sequence[Rejection]:
        """Fold a batch into its tables inside the caller's transaction (which also stores offsets).

        Returns the records it refused; nothing of them is written (they go to the DLQ).
        """
        ...

    def digests(self, connection: Connection) -> dict[str, str]:
        """Per-conversation digest of its rows (for `convdb audit diff`)."""
        ...

    def after_commit(self, engine: Engine, caught_up: set[tuple[str, int]]) -> None:
        """Effects that must stay out of the store transaction and out of replays (LLM titles).

        The live runner calls it after each committed batch (and when idle) with the
        topic-partitions consumed to their end; most projectors do nothing.
        """
        ...


@dataclass(frozen=True)
class DigestOf:
    """Rows that make up a conversation's digest: some columns of a table, in a fixed order."""

    table: sa.Table
    columns: tuple[str, ...] = ()
    """The columns hashed; empty means every column."""
    order_by: tuple[str, ...] = ()
    """Row order within a conversation; empty means the primary key."""
    precomputed: bool = False
    """The one column already holds the conversation's digest (the projection computes it, as
    `view.digest`): it is the digest, not hashed again. Then it is the projector's only source."""


class TableProjector:
    """A projector over declared tables: create, drop and digests come from the declarations.

    Subclasses set `name`, `metadata` (their tables), `digest_of` and write `apply`.
    """

    name: ClassVar[str]
    topics: ClassVar[tuple[Topic, ...]] = (EVENTS,)
    version: ClassVar[int] = 1
    metadata: ClassVar[sa.MetaData]
    """Every table of the projection."""
    digest_of: ClassVar[tuple[DigestOf, ...]] = ()
    """What `digests` hashes per conversation (the tables need a `conversation_id` column)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings

    def create(self, connection: Connection) -> None:
        """Create the declared tables (idempotent)."""
        self.metadata.create_all(connection)

    def drop(self, connection: Connection) -> None:
        """Drop the declared tables."""
        self.metadata.drop_all(connection)

    def apply(self, connection: Connection, batch: Sequence[ConsumedRecord]) -> Sequence[Rejection]:
        """Fold a batch into the tables; returns the refused records."""
        raise NotImplementedError

    def digests(self, connection: Connection) -> dict[str, str]:
        """Per-conversation sha256 over the declared digest rows, source by source, in order."""
        if len(self.digest_of) == 1 and self.digest_of[0].precomputed:
            table, (column,) = self.digest_of[0].table, self.digest_of[0].columns
            return dict(connection.execute(sa.select(table.c.conversation_id, table.c[column])).all())
        hashes: dict[str, Any] = {}
        for source in self.digest_of:
            table = source.table
            cols = [table.c[c] for c in source.columns] or list(table.columns)
            order = [table.c[c] for c in source.order_by] or list(table.primary_key.columns)
            query = sa.select(table.c.conversation_id, *cols).order_by(table.c.conversation_id, *order)
            for conv, *values in connection.execute(query):
                line = json.dumps([table.name, *values], default=str, sort_keys=True) + "\n"
                hashes.setdefault(conv, hashlib.sha256()).update(line.encode())
        return {conv: h.hexdigest() for conv, h in hashes.items()}

    def after_commit(self, engine: Engine, caught_up: set[tuple[str, int]]) -> None:
        """No effect outside the store transaction."""


@dataclass(frozen=True)
class Fold(Generic[S]):
    """A pure per-conversation projection: `initial`, `fold` and its batched `fold_all`."""

    initial: Callable[[str], S]
    fold: Callable[[S, Any], S]
    fold_all: Callable[[S, Iterable[Any]], S]
    """Must equal folding one by one (each projection's tests prove it)."""


@dataclass(frozen=True, slots=True)
class Change(Generic[S]):
    """One conversation a batch changed."""

    conversation_id: str
    stored: Any
    """What `load` found beside the state (the stored row by default); None for a new one."""
    before: S
    after: S
    records: Sequence[ConsumedRecord]
    """The records folded (refused ones left out), in log order."""


class ConversationProjector(TableProjector, Generic[S]):
    """A projection folded per conversation over the events, one state per conversation.

    `apply` is written here once: group the batch by conversation, load the touched states,
    fold (refused records are returned, the rest folded), write the changed ones. Subclasses
    declare `table` (keyed by `conversation_id`), `projection`, `to_row` and `from_row`, and
    may replace `load` or `write` (e.g. a cache, a bulk write path).
    """

    table: ClassVar[sa.Table]
    """One row per conversation, primary key `conversation_id`."""
    projection: ClassVar[Fold[Any]]

    def apply(self, connection: Connection, batch: Sequence[ConsumedRecord]) -> Sequence[Rejection]:
        """Fold the batch into each touched conversation; write the changed ones; return refusals."""
        batch = Batch.of(batch)
        groups = batch.by_conversation()
        if not groups:
            return []
        loaded = self.load(connection, list(groups))
        projection = self.projection
        rejected: list[Rejection] = []
        changes: list[Change[S]] = []
        for conv, group in groups.items():
            stored, before = loaded.get(conv) or (None, projection.initial(conv))
            after, folded = fold_records(projection, before, group, rejected)
            if after is not before:
                changes.append(Change(conv, stored, before, after, folded))
        if changes:
            self.write(connection, changes, batch)
        return rejected

    def load(self, connection: Connection, conversation_ids: list[str]) -> dict[str, tuple[Any, S]]:
        """The stored (row, state) of these conversations; missing ones are absent."""
        rows = load_rows(connection, self.table, conversation_ids)
        return {conv: (row, self.from_row(row)) for conv, row in rows.items()}

    def write(self, connection: Connection, changes: list[Change[S]], batch: Batch) -> None:  # noqa: ARG002
        """Upsert the changed conversations' rows (an override may use the batch's shared work)."""
        upsert(connection, self.table, [self.to_row(c) for c in changes], ["conversation_id"])

    def to_row(self, change: Change[S]) -> dict[str, Any]:
        """The table row of a changed conversation."""
        raise NotImplementedError

    def from_row(self, row: Mapping[str, Any]) -> S:
        """The state a stored row holds (inverse of `to_row`)."""
        raise NotImplementedError


def fold_records(
    projection: Fold[S], state: S, records: Sequence[ConsumedRecord], rejected: list[Rejection]
) -> tuple[S, Sequence[ConsumedRecord]]:
    """Fold records with the batched `fold_all`; if it refuses one, again record by record.

    A record the projection refuses (`ProjectionError`, or any exception the pure fold raises on
    its value: an overflow, a recursion) is added to `rejected` and skipped, `state` unchanged.
    Returns the final state and the records that were folded.
    """
    try:
        return projection.fold_all(state, [r.value for r in records]), records
    except Exception:  # noqa: BLE001, S110 - one by one below tells which record, and why
        pass
    folded = []
    for record in records:
        try:
            state = projection.fold(state, record.value)
        except Exception as exc:  # noqa: BLE001 - a pure fold has no other failure than its input
            rejected.append(Rejection(record, exc))
            continue
        folded.append(record)
    return state, folded


def load_rows(
    connection: Connection, table: sa.Table, keys: Sequence[str], key: str = "conversation_id"
) -> dict[str, Mapping[str, Any]]:
    """Stored rows of `table` whose `key` column is one of `keys`, by key (chunked `IN` queries)."""
    query = _rows_query(table, key)
    found: dict[str, Mapping[str, Any]] = {}
    for start in range(0, len(keys), CHUNK):
        for row in connection.execute(query, {"keys": list(keys[start : start + CHUNK])}).mappings():
            # A RowMapping is keyed by name or Column (Mapping is invariant in its key); read by name.
            found[row[key]] = row  # type: ignore[assignment]
    return found


_ROW_QUERIES: dict[tuple[sa.Table, str], sa.Select[Any]] = {}


def _rows_query(table: sa.Table, key: str) -> sa.Select[Any]:
    # Built once per table (an expanding parameter takes the keys): building the SELECT anew on
    # every call was a good part of a small batch's store time.
    query = _ROW_QUERIES.get((table, key))
    if query is None:
        query = sa.select(table).where(table.c[key].in_(sa.bindparam("keys", expanding=True)))
        _ROW_QUERIES[(table, key)] = query
    return query
