"""Archive key layout: a pure function of topic, partition and offset range (DESIGN §9).

Keys are ``{prefix}/{topic}/partition={p}/{start:020d}-{end:020d}.avro`` with a sidecar index
``...{start:020d}-{end:020d}.idx.json`` beside each object. Offsets are zero-padded so that
listing order is offset order (quix `sinks/community/file/base.py` `_filename`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OBJECT_SUFFIX = ".avro"
INDEX_SUFFIX = ".idx.json"
_NAME = re.compile(r"^(\d{20})-(\d{20})\.avro$")


@dataclass(frozen=True, order=True, slots=True)
class ObjectRef:
    """One archive object: where it is and which offsets (inclusive) it holds."""

    topic: str
    partition: int
    start: int
    end: int
    key: str


def join(*parts: str) -> str:
    """Join key parts with '/', skipping empty ones (an empty prefix means the bucket root)."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def partition_prefix(prefix: str, topic: str, partition: int) -> str:
    """The folder holding one topic-partition's objects, with a trailing '/'."""
    return join(prefix, topic, f"partition={partition}") + "/"


def object_key(prefix: str, topic: str, partition: int, start: int, end: int) -> str:
    """Key of the object holding offsets start..end (inclusive) of topic[partition]."""
    return f"{partition_prefix(prefix, topic, partition)}{start:020d}-{end:020d}{OBJECT_SUFFIX}"


def index_key(object_key_: str) -> str:
    """Key of the sidecar index of an object."""
    return object_key_.removesuffix(OBJECT_SUFFIX) + INDEX_SUFFIX


def start_after(prefix: str, topic: str, partition: int, offset: int) -> str:
    """A listing bound: keys after it are objects of the partition starting at `offset` or later."""
    return f"{partition_prefix(prefix, topic, partition)}{offset:020d}-"


def parse_object_key(prefix: str, topic: str, partition: int, key: str) -> ObjectRef | None:
    """The `ObjectRef` of a listed key, or None when it is not an archive object (e.g. a sidecar)."""
    folder = partition_prefix(prefix, topic, partition)
    if not key.startswith(folder):
        return None
    match = _NAME.match(key[len(folder) :])
    if match is None:
        return None
    return ObjectRef(topic, partition, int(match.group(1)), int(match.group(2)), key)
