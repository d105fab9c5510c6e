"""What a runner may write, and which failures are a record's fault rather than the broker's.

A record the broker refuses as too large, or one the codec cannot encode, fails the same way on
every retry: retried, it would stop its partition for every tenant on it. So the runner checks
what an inbox record makes before staging it (`check_sizes`), cuts a dead letter to fit
(`fit_dead_letter`), and tells such failures (`record_fault`) from the broker being away, which
is retried.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from confluent_kafka import KafkaError, KafkaException

from convdb.infra.dlq import ERROR_MESSAGE
from convdb.infra.errors import InfraError
from convdb.infra.limits import HEADROOM
from convdb.producers.errors import RecordTooLargeError
from convdb.producers.publisher import RawRecord
from convdb.schemas import AvroModel, Codec
from convdb.schemas.validation import check_record

_FIELD_BYTES = 16
"""More than a long, a double, a timestamp or a string's length prefix takes in Avro."""
_TOO_LARGE_CODES = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
_TOO_LARGE_TEXT = ("message size too large", "msg_size_too_large", "record_list_too_large")


def check_sizes(codec: Codec, limit: int, records: Sequence[AvroModel], where: str) -> None:
    """Refuse records the codec would refuse, or too large for one broker record.

    A record whose texts cannot add up to the limit (4 bytes a character at most) is not encoded
    here: only a large one costs an encoding more than its commit does.

    Raises:
        InvalidRecordError: one breaks the identifier and text rules (nothing was written).
        RecordTooLargeError: one does not fit.
        SchemaError: one cannot be encoded.
    """
    for record in records:
        check_record(record, where)
        if _most_bytes(record) + HEADROOM <= limit:
            continue
        size = len(codec.encode(record)) + len(record.conversation_id.encode()) + HEADROOM
        if size > limit:
            raise RecordTooLargeError(
                f"{where}: {type(record).__name__} {getattr(record, 'id', '')[:80]} would be a record of "
                f"{size} bytes; the runner writes at most {limit} (CONVDB_RUNTIME__MAX_RECORD_BYTES)"
            )


def _most_bytes(record: AvroModel) -> int:
    """An upper bound of a record's encoded size: UTF-8 takes at most 4 bytes a character, and
    every other field (numbers, times, flags) less than `_FIELD_BYTES`."""
    total = 64  # framing: fingerprint, union branch
    for value in record.__dict__.values():
        kind = type(value)
        if kind is str or kind is bytes:
            total += 4 * len(value)
        elif kind is tuple:
            total += sum(4 * len(v) if type(v) is str or type(v) is bytes else 0 for v in value)
            total += _FIELD_BYTES * len(value)
        total += _FIELD_BYTES
    return total


def fit_dead_letter(record: RawRecord, limit: int) -> RawRecord:
    """The dead letter as it is when it fits, else without its value (the coordinates in its
    headers still point at the original), so that a dead letter itself never wedges a partition."""
    topic, key, value, headers = record
    size = len(value) + len(key or b"") + sum(len(k) + len(v) for k, v in headers) + HEADROOM
    if size <= limit:
        return record
    note = f" (the record's {len(value)}-byte value is left out of this dead letter, too large with it)"
    kept = [(k, v + note.encode()) if k == ERROR_MESSAGE else (k, v) for k, v in headers]
    return topic, key, b"", kept


def too_large(exc: BaseException) -> bool:
    """True when a failed write says the broker (or librdkafka) refused a record for its size."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaException) and seen.args and isinstance(seen.args[0], KafkaError):
            if seen.args[0].code() in _TOO_LARGE_CODES:
                return True
        if any(text in str(seen).lower() for text in _TOO_LARGE_TEXT):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def record_fault(exc: BaseException) -> bool:
    """True when a failure is the record's own and retrying cannot help (too large, unencodable,
    a bug it triggers); False for infrastructure (broker, local store, disk), which is retried."""
    if too_large(exc):
        return True
    return not isinstance(exc, InfraError | KafkaException | sqlite3.Error | OSError)
