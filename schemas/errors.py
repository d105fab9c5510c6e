"""Errors raised by the schemas package; all derive from `ConvdbError`."""

from __future__ import annotations


class ConvdbError(Exception):
    """Root of every error convdb raises on purpose."""


class SchemaError(ConvdbError):
    """A record could not be encoded or decoded."""


class NotAvroError(SchemaError):
    """The bytes do not start with a known Avro framing (garbage, or another format)."""


class UnknownFingerprintError(SchemaError):
    """The writer's schema fingerprint (or registry id) matches no schema this reader knows."""


class TruncatedRecordError(SchemaError):
    """The payload ended before the record it announces was complete."""


class CorruptRecordError(SchemaError):
    """The payload does not decode under its writer's schema (bad bytes, or bytes left over)."""


class UnreadableVersionError(SchemaError):
    """The record holds a value this reader's schema version cannot represent (an enum symbol added
    in a later version): a reader that predates it refuses the record rather than misread it."""


class InvalidRecordError(SchemaError):
    """The record does not satisfy its schema or model (wrong field, type or value)."""


class UnexpectedRecordError(SchemaError):
    """The record decoded fine but is not of a type allowed on this topic."""


class InvalidValueError(ConvdbError, ValueError):
    """An identifier or text given at an entry point breaks the rules of `convdb.schemas.validation`."""
