"""Errors raised by the consumers package; all derive from `ConvdbError`."""

from __future__ import annotations

from convdb.schemas.errors import ConvdbError


class ConsumerError(ConvdbError):
    """Base of the consumer-side errors."""


class StoreError(ConsumerError):
    """The projection store is unreachable, or its URL is not usable."""


class PluginError(ConsumerError):
    """A consumer plugin is unknown or does not load."""


class QueryInputError(ConsumerError):
    """A query API request has bad filters or a bad cursor (HTTP 400)."""


class StoredViewError(ConsumerError):
    """A conversation's stored view log does not fold back to its stored row (an event reused
    an earlier event's id); the records that need its full view are refused."""
