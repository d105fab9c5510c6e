"""Errors raised by the archive, replay, audit and export code."""

from __future__ import annotations

from convdb.schemas.errors import ConvdbError


class ArchiveError(ConvdbError):
    """The archive could not be read or written (S3 or folder unreachable, object missing)."""


class ArchiveUrlError(ArchiveError):
    """`CONVDB_ARCHIVE_URL` is missing or is neither `s3://bucket/prefix` nor `file:///dir`."""


class CorruptArchiveError(ArchiveError):
    """An archive object is not a readable Avro container of archived records."""


class OffsetRangeError(ConvdbError):
    """Requested offsets or times lie outside what Kafka and the archive hold."""


class UnknownConsumerError(ConvdbError):
    """No projector plugin with that name is registered under `convdb.consumers`."""


class StoreUrlError(ConvdbError):
    """A store URL cannot be opened (bad syntax, unknown driver, unreachable database)."""
