"""The runner fleet: conversations owned by inbox partition, fenced writers, snapshot restore."""

from producers.fleet.conversation import FleetConversation
from producers.fleet.owner import FleetContext, PartitionOwner, transactional_id
from producers.fleet.runner import FleetRunner, StopPoints
from producers.fleet.store import SnapshotStore

__all__ = [
    "FleetContext",
    "FleetConversation",
    "FleetRunner",
    "PartitionOwner",
    "SnapshotStore",
    "StopPoints",
    "transactional_id",
]
