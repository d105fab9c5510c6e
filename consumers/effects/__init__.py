"""The effects consumer: the ledger per operation, counts by status and the queue of unknowns."""

from convdb.consumers.effects.projector import EffectsConsumer, load_operations, to_row
from convdb.consumers.effects.queries import (
    conversation_status,
    counts_by_conversation,
    counts_by_status,
    get_operation,
    list_operations,
    operation_ledger,
    operation_view,
    parked_receipts,
)

__all__ = [
    "EffectsConsumer",
    "conversation_status",
    "counts_by_conversation",
    "counts_by_status",
    "get_operation",
    "list_operations",
    "load_operations",
    "operation_ledger",
    "operation_view",
    "parked_receipts",
    "to_row",
]
