"""Errors raised by the consumers package; all derive from `ConvdbError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from schemas.errors import ConvdbError

if TYPE_CHECKING:
    from consumers.base import ConsumedRecord


class ConsumerError(ConvdbError):
    """Base of the consumer-side errors."""


class StoreError(ConsumerError):
    """The projection store is unreachable, or its URL is not usable."""


class DeadLetterError(ConsumerError):
    """A poison record could not be written to the DLQ (the batch is not committed)."""


class PluginError(ConsumerError):
    """A consumer plugin is unknown or does not load."""


class RecordRejectedError(ConsumerError):
    """A projector refused one decoded record (gap, illegal transition): it goes to the DLQ.

    Raised from `Projector.apply`; the runner rolls the batch back, sends `record` to the DLQ
    and applies the batch again without it.
    """

    def __init__(self, record: ConsumedRecord, reason: str) -> None:
        super().__init__(
            f"{record.topic}[{record.partition}]@{record.offset} key={record.key}: {reason}"
        )
        self.record = record
        self.reason = reason


class QueryInputError(ConsumerError):
    """A query API request has bad filters or a bad cursor (HTTP 400)."""
