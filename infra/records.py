"""A consumed Kafka record, with the types it really has.

confluent-kafka has one `Message` class for consumed records, error events, delivery reports and
messages built by hand, so its stubs make a message's topic, partition and offset optional and its
headers a dict or a list of str-or-bytes values. A record the consumer delivers without error has
its coordinates, and its headers are a list of (name, bytes-or-None) pairs: these functions say so
in one place, and the code that reads records is type-checked with what it really gets.
"""

from __future__ import annotations

from confluent_kafka import Message

from convdb.infra.errors import InfraError


def coordinates(msg: Message) -> tuple[str, int, int]:
    """(topic, partition, offset) of a record the consumer delivered (or of a partition-EOF event).

    Raises:
        InfraError: `msg` has none (an error event that names no partition, a hand-built message).
    """
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    if topic is None or partition is None or offset is None:
        raise InfraError(f"a message without coordinates ({topic}[{partition}]@{offset}) read as a record")
    return topic, partition, offset


def header_items(msg: Message) -> list[tuple[str, bytes | None]]:
    """A record's headers as (name, value) pairs in their order; a text value (only on a message
    built by hand) as its UTF-8 bytes."""
    headers = msg.headers()
    if not headers:
        return []
    pairs = headers.items() if isinstance(headers, dict) else headers
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]
