"""Load one conversation's records (events, ledger, receipts, snapshots) from its partition.

Every topic is keyed by conversation_id with the Java client's partitioner, so the
conversation lives in one known partition of each topic; only that partition is read.
Issue 7's runners replace the read-from-start with snapshot restore + tail.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from infra.errors import InfraError
from infra.kafka import common_config
from infra.settings import Settings
from schemas import Codec, Event, LedgerRecord, Receipt, Snapshot
from schemas.errors import SchemaError
from schemas.topics import EFFECTS, EVENTS, RECEIPTS, STATE

logger = logging.getLogger(__name__)


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (Java `Utils.murmur2`), as an unsigned 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length & ~3
    extra = length % 4
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def partition_for(key: str, partitions: int) -> int:
    """The partition the producer's `murmur2_random` partitioner picks for a key."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


@dataclass
class History:
    """Everything recorded about one conversation, in log order."""

    events: list[Event] = field(default_factory=list)
    ledger: list[LedgerRecord] = field(default_factory=list)
    receipts: list[Receipt] = field(default_factory=list)
    snapshot: Snapshot | None = None
    events_position: tuple[int, int] = (-1, -1)


def _read_partitions(settings: Settings, wanted: list[TopicPartition], key: str) -> list[Message]:
    """Records of `key` in the given partitions, each read to the end the fetch reports.

    One consumer for all topics: the embedded broker holds an empty fetch ~0.5 s, so reading
    topic by topic would cost that per topic.
    """
    consumer = Consumer(
        {
            **common_config(settings),
            "group.id": f"{settings.namespace}.history-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
        }
    )
    out: list[Message] = []
    pending = {(tp.topic, tp.partition) for tp in wanted}
    try:
        consumer.assign(wanted)
        while pending:
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                if err is None:
                    if (msg.key() or b"").decode(errors="replace") == key:
                        out.append(msg)
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard((msg.topic(), msg.partition()))
                elif not err.retriable():
                    raise InfraError(f"reading {msg.topic()}[{msg.partition()}]: {err.str()}")
    finally:
        consumer.close()
    return out


def load_history(settings: Settings, codec: Codec, conversation_id: str) -> History:
    """Read the conversation's records from the events, effects, receipts and state topics."""
    partition = partition_for(conversation_id, settings.partitions)
    topics = {t.name(settings.namespace): t for t in (EVENTS, EFFECTS, RECEIPTS, STATE)}
    wanted = [TopicPartition(name, partition, OFFSET_BEGINNING) for name in topics]
    history = History()
    for msg in _read_partitions(settings, wanted, conversation_id):
        topic = topics[msg.topic()]
        try:
            record = codec.decode(msg.value(), expect=topic.value_types)
        except SchemaError as exc:
            # Not ours to fix here: the consumers route it to the DLQ; recovery goes on without it.
            logger.error(
                "%s[%d]@%d key=%s: skipped undecodable record: %s",
                msg.topic(),
                msg.partition(),
                msg.offset(),
                conversation_id,
                exc,
            )
            continue
        if topic is EVENTS:
            history.events.append(record)
            history.events_position = (msg.partition(), msg.offset() + 1)
        elif topic is EFFECTS:
            history.ledger.append(record)
        elif topic is RECEIPTS:
            history.receipts.append(record)
        else:
            history.snapshot = record
    return history
