"""The topic registry: every topic convdb uses, declared once as an object (DESIGN §4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from convdb.schemas._types import AvroModel
from convdb.schemas.events import EVENT_TYPES, Event
from convdb.schemas.graph import GRAPH_TYPES, GraphRecord
from convdb.schemas.records import LEDGER_TYPES, ExternalBatch, InboxMessage, LedgerRecord, Receipt, Snapshot

V = TypeVar("V", bound=AvroModel)


@dataclass(frozen=True)
class Topic(Generic[V]):
    """A topic: its name under a namespace, what it holds, and how the broker keeps it.

    `codec.decode(data, expect=topic.value_types)` is typed as the topic's record type `V`.
    """

    suffix: str
    value_types: tuple[type[V], ...]
    config: dict[str, str] = field(default_factory=dict)
    doc: str = ""

    def name(self, namespace: str) -> str:
        """Full topic name, e.g. ``convdb.events`` for namespace ``convdb``."""
        return f"{namespace}.{self.suffix}"


EVENTS: Topic[Event] = Topic(
    "events",
    EVENT_TYPES,
    {"cleanup.policy": "delete", "retention.ms": "-1"},
    "every conversation event, keyed by conversation_id",
)
STATE: Topic[Snapshot] = Topic(
    "state",
    (Snapshot,),
    {"cleanup.policy": "compact"},
    "base-state snapshots with the events offset they cover",
)
INBOX: Topic[InboxMessage | ExternalBatch] = Topic(
    "inbox",
    (InboxMessage, ExternalBatch),
    {"cleanup.policy": "delete"},
    "user messages and commands sent to a conversation, even before it runs; records of foreign "
    "systems (OpenHands) to append",
)
RECEIPTS: Topic[Receipt] = Topic(
    "receipts", (Receipt,), {"cleanup.policy": "delete"}, "provider receipts carrying operation_id"
)
EFFECTS: Topic[LedgerRecord] = Topic(
    "effects", LEDGER_TYPES, {"cleanup.policy": "delete"}, "effect-ledger transitions"
)
GRAPH: Topic[GraphRecord] = Topic(
    "graph",
    GRAPH_TYPES,  # type: ignore[arg-type]
    {"cleanup.policy": "delete", "retention.ms": "-1"},
    "LangGraph checkpoints, task writes and tombstones, keyed by thread (= conversation) id",
)
DLQ: Topic[AvroModel] = Topic(
    "dlq",
    (),
    {"cleanup.policy": "delete"},
    "undecodable or invalid records, original bytes + error headers",
)

ALL_TOPICS: tuple[Topic[Any], ...] = (EVENTS, STATE, INBOX, RECEIPTS, EFFECTS, GRAPH, DLQ)
"""Every topic; all share one partition count so joined topics are co-partitioned."""
