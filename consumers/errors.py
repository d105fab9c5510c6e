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


class PluginError(ConsumerError):
    """A consumer plugin is unknown or does not load."""


class RecordsRejectedError(ConsumerError):
    """A projector refused decoded records (seq gap, unknown parent): they go to the DLQ.

    Raised from `Projector.apply` after folding the rest of the batch; the runner rolls the
    batch back, sends every rejected record to the DLQ and applies the batch again without them.
    """

    def __init__(self, rejected: list[tuple[ConsumedRecord, BaseException]]) -> None:
        first, error = rejected[0]
        super().__init__(
            f"{len(rejected)} record(s) rejected, first {first.topic}[{first.partition}]@{first.offset} "
            f"key={first.key}: {type(error).__name__}: {error}"
        )
        self.rejected = rejected


class QueryInputError(ConsumerError):
    """A query API request has bad filters or a bad cursor (HTTP 400)."""
