"""Reading the archive back: objects of a partition, a conversation's objects, records in order."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from convdb.consumers.archive import layout
from convdb.consumers.archive.container import RawRecord, read_container
from convdb.consumers.archive.errors import ArchiveError
from convdb.consumers.archive.index import ObjectIndex
from convdb.consumers.archive.target import ArchiveTarget
from convdb.infra.partitioner import partition_for

logger = logging.getLogger(__name__)

PREFETCH = 4
"""Objects downloaded ahead of the one being decoded."""


class ArchiveReader:
    """Lists and reads archive objects under one prefix of one target."""

    def __init__(self, target: ArchiveTarget, prefix: str) -> None:
        self.target = target
        self.prefix = prefix
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="archive-get")

    def close(self) -> None:
        """Stop the download threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def objects(self, topic: str, partition: int, from_offset: int = 0) -> list[layout.ObjectRef]:
        """The partition's objects that hold offsets >= from_offset, in offset order."""
        folder = layout.partition_prefix(self.prefix, topic, partition)
        refs = []
        for key in self.target.list(folder):
            ref = layout.parse_object_key(self.prefix, topic, partition, key)
            if ref is not None and ref.end >= from_offset:
                refs.append(ref)
        return refs

    def extent(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(first offset, last offset) archived for a partition, or None when it has nothing."""
        refs = self.objects(topic, partition)
        return (refs[0].start, max(r.end for r in refs)) if refs else None

    def index(self, ref: layout.ObjectRef) -> ObjectIndex:
        """The object's sidecar index, rebuilt from the object itself when the sidecar is missing."""
        data = self.target.get(layout.index_key(ref.key))
        if data is not None:
            return ObjectIndex.from_json(data, ref.key)
        logger.warning("sidecar index of %s missing: reading the object", ref.key)
        return ObjectIndex.build(list(self.records_of(ref)))

    def indexes(self, refs: list[layout.ObjectRef]) -> list[ObjectIndex]:
        """Sidecar indexes of many objects, fetched in parallel."""
        return list(self._pool.map(self.index, refs))

    def records_of(self, ref: layout.ObjectRef) -> Iterator[RawRecord]:
        """The records of one object."""
        yield from read_container(self._get(ref), ref.key)

    @staticmethod
    def records_of_bytes(data: bytes, key: str) -> Iterator[RawRecord]:
        """The records of an object's bytes."""
        yield from read_container(data, key)

    def _get(self, ref: layout.ObjectRef) -> bytes:
        data = self.target.get(ref.key)
        if data is None:
            raise ArchiveError(f"archive object {self.target.url}/{ref.key} vanished while reading")
        return data

    def read(
        self, refs: list[layout.ObjectRef], from_offset: int = 0, to_offset: int | None = None
    ) -> Iterator[RawRecord]:
        """Records of the objects in [from_offset, to_offset), each offset once, downloads prefetched."""
        next_offset: dict[tuple[str, int], int] = {}
        pending: deque[tuple[layout.ObjectRef, Future[bytes]]] = deque()
        todo = iter(refs)
        for ref in todo:
            pending.append((ref, self._pool.submit(self._get, ref)))
            if len(pending) >= PREFETCH:
                break
        while pending:
            ref, future = pending.popleft()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, self._pool.submit(self._get, nxt)))
            floor = next_offset.get((ref.topic, ref.partition), from_offset)
            for rec in read_container(future.result(), ref.key):
                if rec.offset < floor:
                    continue  # overlap with an earlier object: each offset is yielded once
                if to_offset is not None and rec.offset >= to_offset:
                    break
                floor = rec.offset + 1
                yield rec
            next_offset[(ref.topic, ref.partition)] = floor

    def conversation_objects(
        self, topic: str, conversation_id: str, partitions: int
    ) -> list[layout.ObjectRef]:
        """The objects holding a conversation: its partition's sidecars only, all partitions if none match."""
        home = partition_for(conversation_id, partitions)
        found = self._matching(topic, [home], conversation_id)
        if not found:
            others = [p for p in self.partitions(topic) if p != home]
            found = self._matching(topic, others, conversation_id)
        return found

    def _matching(self, topic: str, partitions: list[int], conversation_id: str) -> list[layout.ObjectRef]:
        refs = [r for p in partitions for r in self.objects(topic, p)]
        return [
            r for r, idx in zip(refs, self.indexes(refs), strict=True) if conversation_id in idx.conversations
        ]

    def partitions(self, topic: str) -> list[int]:
        """Partitions of a topic that have a folder in the archive."""
        names = self.target.folders(layout.join(self.prefix, topic) + "/")
        return sorted(int(n[10:]) for n in names if n.startswith("partition=") and n[10:].isdigit())
