"""The dead-letter contract: which headers a record sent to `convdb.dlq` carries.

Every writer of the DLQ (the consumers' runner, the reconciler, the conversation runners)
keeps the record's original key and value bytes and adds these headers, so one reader
understands every dead letter. `convdb.original.*` identify a record sent twice.
"""

from __future__ import annotations

ERROR_CLASS = "convdb.error.class"
"""Class name of the error, e.g. `SequenceGapError`."""
ERROR_MESSAGE = "convdb.error.message"
"""The error's message (at most 4000 bytes)."""
ORIGINAL_TOPIC = "convdb.original.topic"
ORIGINAL_PARTITION = "convdb.original.partition"
ORIGINAL_OFFSET = "convdb.original.offset"
CONSUMER = "convdb.consumer"
"""Name of the component that refused the record (consumer, reconciler, runner)."""

_MESSAGE_LIMIT = 4000


def error_headers(
    consumer: str, topic: str, partition: int, offset: int, error: BaseException
) -> list[tuple[str, bytes]]:
    """Headers that say which record failed, where it came from, who refused it and why."""
    return [
        (ERROR_CLASS, type(error).__name__.encode()),
        (ERROR_MESSAGE, str(error).encode()[:_MESSAGE_LIMIT]),
        (ORIGINAL_TOPIC, topic.encode()),
        (ORIGINAL_PARTITION, str(partition).encode()),
        (ORIGINAL_OFFSET, str(offset).encode()),
        (CONSUMER, consumer.encode()),
    ]
