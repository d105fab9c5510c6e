"""The runner's local snapshot store: a SQLite file, a cache of the state topic (the changelog).

Each row is the encoded `Snapshot` exactly as committed to the state topic, with its offset there;
a per-partition checkpoint says up to which state offset the file reflects the changelog, so a
restore reads only the changelog records written after it (by another runner, say).
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS snapshots (partition INTEGER NOT NULL, conversation_id TEXT NOT NULL, "
    "state_offset INTEGER NOT NULL, record BLOB NOT NULL, PRIMARY KEY (partition, conversation_id))",
    "CREATE TABLE IF NOT EXISTS checkpoints (partition INTEGER PRIMARY KEY, next_offset INTEGER NOT NULL, "
    "latest_offset INTEGER NOT NULL)",
)


@dataclass
class StoredPartition:
    """What the local store holds for one partition."""

    snapshots: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    """conversation_id -> (state offset, encoded Snapshot)."""
    next_offset: int = 0
    """First state-topic offset the file does not reflect."""
    latest_offset: int = -1
    """State offset of the newest snapshot of the partition (its watermarks are the partition's)."""


class SnapshotStore:
    """Snapshots per (partition, conversation) in one SQLite file; thread-safe."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        # WAL + NORMAL: a snapshot write costs no fsync; losing the newest rows in a power cut only
        # makes the next restore read a longer changelog tail.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        for statement in _SCHEMA:
            self._db.execute(statement)

    def load(self, partition: int) -> StoredPartition:
        """Every stored snapshot of a partition and its checkpoint."""
        with self._lock:
            rows = self._db.execute(
                "SELECT conversation_id, state_offset, record FROM snapshots WHERE partition = ?",
                (partition,),
            ).fetchall()
            mark = self._db.execute(
                "SELECT next_offset, latest_offset FROM checkpoints WHERE partition = ?", (partition,)
            ).fetchone()
        stored = StoredPartition({cid: (offset, bytes(record)) for cid, offset, record in rows})
        if mark is not None:
            stored.next_offset, stored.latest_offset = mark
        return stored

    def save(self, partition: int, items: list[tuple[str, int, bytes]], next_offset: int) -> None:
        """Upsert snapshots (conversation_id, state offset, bytes) and move the checkpoint forward."""
        latest = max((offset for _, offset, _ in items), default=-1)
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT INTO snapshots VALUES (?, ?, ?, ?) "
                "ON CONFLICT (partition, conversation_id) DO UPDATE SET "
                "state_offset = excluded.state_offset, record = excluded.record "
                "WHERE excluded.state_offset > snapshots.state_offset",
                [(partition, cid, offset, record) for cid, offset, record in items],
            )
            self._db.execute(
                "INSERT INTO checkpoints VALUES (?, ?, ?) ON CONFLICT (partition) DO UPDATE SET "
                "next_offset = max(next_offset, excluded.next_offset), "
                "latest_offset = max(latest_offset, excluded.latest_offset)",
                (partition, next_offset, latest),
            )
            self._db.execute("COMMIT")

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            self._db.close()
