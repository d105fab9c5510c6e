"""The body of a batch's store transaction, shared by the live runner and replay.

Lock the offset rows the batch advances, hand each projector the records at or after its
stored offset, agree on the refused records, and store the new offsets. Co-hosted projectors
skip the same records: a record one of them refuses is dead-lettered once and applied by
none. When some applied what another refused (rare: poison in `consume all`), a savepoint
lets them apply the batch again without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy.engine import Connection

from convdb.consumers.base import Batch, ConsumedRecord, Projector, Rejection
from convdb.consumers.store import TopicPartitionKey, lock_offsets, store_offsets


def apply_batch(
    conn: Connection,
    projectors: Sequence[Projector],
    namespace: str,
    batch: Batch,
    ends: Mapping[tuple[str, int], int],
) -> tuple[int, list[Rejection]]:
    """Apply a batch to the projectors and store their offsets, in `conn`'s transaction.

    `ends` is the next offset of each topic-partition the batch read (poison included).
    Returns how many records were applied and the refused ones (to dead-letter).
    """
    reads = {p.name: {t.name(namespace) for t in p.topics} for p in projectors}
    keys = [(p.name, t, part) for (t, part) in ends for p in projectors if t in reads[p.name]]
    stored = lock_offsets(conn, keys)
    starts = _batch_starts(batch)
    excluded: list[Rejection] = []
    while True:
        shares = [(p, records_for(p.name, batch, starts, stored)) for p in projectors]
        savepoint = conn.begin_nested() if len(shares) > 1 else None
        rejected, agreed = _apply_shares(conn, shares)
        if savepoint is None:
            break
        if agreed:
            savepoint.commit()
            break
        savepoint.rollback()
        excluded += rejected
        batch = batch.without(rejected)
    positions: dict[TopicPartitionKey, int] = {key: max(stored[key], ends[(key[1], key[2])]) for key in keys}
    store_offsets(conn, positions)
    return _applied_count(batch, shares, rejected), excluded + rejected


def _batch_starts(records: Sequence[ConsumedRecord]) -> dict[tuple[str, int], int]:
    starts: dict[tuple[str, int], int] = {}
    for r in records:
        key = (r.topic, r.partition)
        if r.offset < starts.get(key, r.offset + 1):
            starts[key] = r.offset
    return starts


def records_for(
    name: str,
    batch: Batch,
    starts: dict[tuple[str, int], int],
    stored: dict[TopicPartitionKey, int],
) -> Batch:
    """The records at or after the projector's stored offsets; `batch` itself when that is all.

    Handing every projector the same batch lets them share per-batch work (grouping, JSON).
    """
    floors = {tp: stored[(name, *tp)] for tp in starts if (name, *tp) in stored}
    if len(floors) == len(starts) and all(starts[tp] >= floor for tp, floor in floors.items()):
        return batch
    return batch.keep(
        [r for r in batch if (r.topic, r.partition) in floors and r.offset >= floors[(r.topic, r.partition)]]
    )


def _apply_shares(conn: Connection, shares: list[tuple[Projector, Batch]]) -> tuple[list[Rejection], bool]:
    """Apply each projector's share; returns the rejections and whether the projectors agree.

    They agree when every projector that was given a rejected record rejected it too.
    """
    refusals = []
    for projector, share in shares:
        # `or ()`: a plugin written before `apply` returned its refusals returns None.
        returned = projector.apply(conn, share) or ()
        refusals.append((share, {id(r.record): r for r in returned}))
    rejected: dict[int, Rejection] = {}
    for _, refused in refusals:
        for key, rejection in refused.items():
            rejected.setdefault(key, rejection)
    agreed = not rejected or all(
        id(r) not in rejected or id(r) in refused for share, refused in refusals for r in share
    )
    return list(rejected.values()), agreed


def _applied_count(batch: Batch, shares: list[tuple[Projector, Batch]], rejected: list[Rejection]) -> int:
    """Records of the batch that at least one projector applied."""
    if all(share is batch for _, share in shares):
        return len(batch) - len(rejected)  # the common case: no set of 3-tuples
    applied = {(r.topic, r.partition, r.offset) for _, share in shares for r in share}
    return len(applied - {(r.record.topic, r.record.partition, r.record.offset) for r in rejected})
