"""Errors raised by the producers package."""

from __future__ import annotations

from schemas.errors import ConvdbError


class PublishError(ConvdbError):
    """A record was not made durable (broker unreachable past the deadline, or rejected)."""


class FencedError(PublishError):
    """A newer writer took over this transactional id: this writer must stop writing."""


class SequenceGapError(ConvdbError):
    """An event's seq is not last seq + 1 for its conversation (a gap or a duplicate)."""
