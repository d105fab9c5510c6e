"""The runner fleet: conversations owned by inbox partition, fenced writers, snapshot restore."""

from convdb.producers.fleet.owner import FleetContext, PartitionOwner, transactional_id
from convdb.producers.fleet.runner import FleetRunner, StopPoints, serve_until
from convdb.producers.fleet.store import SnapshotStore

__all__ = [
    "FleetContext",
    "FleetRunner",
    "PartitionOwner",
    "SnapshotStore",
    "StopPoints",
    "serve_until",
    "transactional_id",
]
