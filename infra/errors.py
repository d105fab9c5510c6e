"""Errors raised by the infra package."""

from __future__ import annotations

from convdb.schemas.errors import ConvdbError


class InfraError(ConvdbError):
    """An infrastructure piece (broker, S3, store) could not be started or reached."""


class BrokerStartError(InfraError):
    """The embedded broker did not start (binary missing, port not opened in time)."""


class TopicError(InfraError):
    """Topics could not be created or do not match the expected layout."""


class NoBrokerError(InfraError):
    """No broker is configured and no dev stack is running."""


class BrokerUnreachableError(InfraError):
    """A broker is configured but did not answer in time."""


class PublishError(InfraError):
    """A record was not made durable: the broker rejected it or did not acknowledge it in time."""


class FencedError(PublishError):
    """A newer writer took over this transactional id: this writer must stop writing."""
