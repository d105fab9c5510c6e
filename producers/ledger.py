"""A conversation's effect ledger: its operations' states, folded with the one machine.

The fold is `convdb.projections.operation.fold`, the reconciler's and the read side's fold, so resume
takes its decisions on the same states they show. What differs is only what a runner may read:
a restore reads the effects tail from the oldest proposal of an operation still open, so it can
meet later records of operations settled before that point, whose proposal it did not read.
"""

from __future__ import annotations

import logging

from immutables import Map

from convdb.projections import operation
from convdb.projections.errors import ProjectionError
from convdb.projections.operation import OperationState
from convdb.schemas import EffectProposed, LedgerRecord, Receipt

logger = logging.getLogger(__name__)

Ledger = Map[str, OperationState]
"""operation_id -> state (immutable: parallel actions read it while one of them commits)."""

EMPTY: Ledger = Map()


def fold_ledger(ledger: Ledger, record: LedgerRecord | Receipt) -> Ledger:
    """Fold one ledger record (or provider receipt) into the ledger.

    A record the machine refuses changes nothing here, as it changes nothing for the reconciler
    (which sends it to the DLQ) and the read side (which rejects it): the three agree.
    """
    op_id = record.operation_id
    current = ledger.get(op_id)
    if current is None and isinstance(record, LedgerRecord) and not isinstance(record, EffectProposed):
        # A tail that starts after this operation's proposal: it was settled when the snapshot
        # that set the tail's start was taken, so nothing here needs it.
        return ledger
    try:
        new = operation.fold(current or operation.initial(op_id), record)
    except ProjectionError as exc:  # an illegal transition, another tenant's receipt or record
        logger.error("ledger of %s: record ignored: %s", record.conversation_id, exc)
        return ledger
    return ledger if new is current else ledger.set(op_id, new)


def open_operations(ledger: Ledger) -> list[str]:
    """Ids of the operations that still need an outcome, sorted."""
    return sorted(op for op, state in ledger.items() if state.is_open)
