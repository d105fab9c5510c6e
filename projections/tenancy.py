"""The ownership rule (DESIGN §11), written once: a conversation belongs to the tenant of its first
record, and a later record naming another tenant is refused (the caller dead-letters it).

Pure: the runner (inbox messages, resolutions, foreign batches) and the effects fold (receipts,
ledger records of an operation) call it with the owner they know from the log.
"""

from __future__ import annotations

from convdb.projections.errors import TenantMismatchError
from convdb.schemas._types import AvroModel


def refusal(owner: str | None, record: AvroModel, what: str = "conversation") -> str | None:
    """Why `record` may not join what `owner` owns (None: it may; an empty owner owns nothing yet)."""
    if not owner or record.tenant_id == owner:
        return None
    return (
        f"{type(record).__name__} for {what} {record.conversation_id[:80]!r} names tenant "
        f"{record.tenant_id[:80]!r}, but the {what} belongs to another tenant (its first record fixed it)"
    )


def check_owner(owner: str | None, record: AvroModel, what: str = "conversation") -> None:
    """Refuse a record of another tenant than `owner`.

    Raises:
        TenantMismatchError: the record names another tenant (a data error: DLQ).
    """
    reason = refusal(owner, record, what)
    if reason is not None:
        raise TenantMismatchError(reason)
