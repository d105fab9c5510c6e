"""The consumer plugin contract shared by the live runner, replay and audit.

A *projector* is a consumer plugin that folds decoded records into store tables with a pure
projection from `projections/`. The runner (live), `convdb replay` (Kafka or archive) and
`convdb audit` all drive the same three methods, so a replay is the live code path.
Plugins are registered under the `convdb.consumers` entry-point group (name -> class).

A projector may also define `after_commit(engine, caught_up)`: the live runner calls it after
each committed batch (and when idle) with the topic-partitions consumed to their end, for
effects that must stay out of the store transaction and out of replays (LLM titles).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from schemas import AvroModel
from schemas.topics import Topic


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """One decoded record with its Kafka coordinates."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: str
    value: AvroModel


class Projector(Protocol):
    """A consumer whose output is rows in a store, written with the consumed offsets."""

    name: str
    """Plugin name, e.g. 'views'; the consumer group is '<namespace>.<name>'."""

    topics: tuple[Topic, ...]
    """Registry topics it consumes."""

    version: int
    """Version of its table layout; a change means 'drop and rebuild by replay'."""

    def create(self, connection: Any) -> None:
        """Create its tables (idempotent), inside the caller's transaction."""
        ...

    def drop(self, connection: Any) -> None:
        """Drop its tables (before a rebuild), inside the caller's transaction."""
        ...

    def apply(self, connection: Any, records: Sequence[ConsumedRecord]) -> None:
        """Fold a batch into its tables inside the caller's transaction (which also stores offsets)."""
        ...

    def digests(self, connection: Any) -> dict[str, str]:
        """Per-conversation digest of its rows (for `convdb audit diff`)."""
        ...
