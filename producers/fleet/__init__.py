"""The runner fleet: conversations owned by inbox partition, fenced writers, snapshot restore."""

from producers.fleet.owner import FleetContext, PartitionOwner, transactional_id
from producers.fleet.runner import FleetRunner, StopPoints, serve_until
from producers.fleet.store import SnapshotStore

__all__ = [
    "FleetContext",
    "FleetRunner",
    "PartitionOwner",
    "SnapshotStore",
    "StopPoints",
    "serve_until",
    "transactional_id",
]
