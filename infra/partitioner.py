"""Which partition a key lands in: Kafka's murmur2 partitioner, as the producers use it.

Every client is configured with `partitioner: murmur2_random` (the Java client's default), so
a conversation's records are in `partition_for(conversation_id, partitions)` of every topic.
"""

from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (the Java client's `Utils.murmur2`), as a signed 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    for i in range(0, length - length % 4, 4):
        k = (int.from_bytes(data[i : i + 4], "little") * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail, base = length % 4, length - length % 4
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """The partition the producer's `murmur2_random` partitioner sends a key to."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions
