"""Records of the graph topic: a LangGraph thread's checkpoints, task writes and deletions.

A LangGraph thread is a conversation (`conversation_id` is the thread id, the Kafka key), so its
records are co-partitioned with its events and written by the same fenced writer. Values are the
checkpointer serde's typed bytes (`type` + `bytes`), opaque here: the fold in
`convdb.projections.graph` indexes them, `convdb.langgraph` decodes them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from convdb.schemas._types import AvroModel


class GraphCheckpoint(AvroModel):
    """One LangGraph checkpoint, with the blobs of the channels it gave a new version."""

    id: str = Field(description="Unique record id (UUID text).")
    conversation_id: str = Field(description="The LangGraph thread id; the Kafka key.")
    tenant_id: str = Field(description="Tenant that owns the conversation.")
    timestamp: AwareDatetime = Field(description="When the checkpoint was recorded (UTC).")
    checkpoint_ns: str = Field("", description="Checkpoint namespace ('' for the root graph).")
    checkpoint_id: str = Field(description="LangGraph's checkpoint id (uuid6: sorts by time).")
    parent_checkpoint_id: str | None = Field(None, description="The checkpoint it follows in its namespace.")
    checkpoint_type: str = Field(description="Serde type of `checkpoint`.")
    checkpoint: bytes = Field(description="The checkpoint without its channel values (serde bytes).")
    metadata_type: str = Field(description="Serde type of `metadata`.")
    metadata: bytes = Field(description="The checkpoint's metadata (serde bytes).")
    blob_channels: tuple[str, ...] = Field((), description="Channels given a new version here.")
    blob_versions: tuple[str, ...] = Field((), description="Their new versions (as text), in the same order.")
    blob_types: tuple[str, ...] = Field((), description="Serde type of each blob ('empty': no value).")
    blob_values: tuple[bytes, ...] = Field((), description="Serde bytes of each blob.")
    kind: Literal["graph_checkpoint"] = Field("graph_checkpoint", description="Always 'graph_checkpoint'.")


class GraphWrites(AvroModel):
    """A task's writes, pending on the checkpoint at which the task started."""

    id: str = Field(description="Unique record id (UUID text).")
    conversation_id: str = Field(description="The LangGraph thread id; the Kafka key.")
    tenant_id: str = Field(description="Tenant that owns the conversation.")
    timestamp: AwareDatetime = Field(description="When the writes were recorded (UTC).")
    checkpoint_ns: str = Field("", description="Checkpoint namespace ('' for the root graph).")
    checkpoint_id: str = Field(description="The checkpoint the writes are pending on.")
    task_id: str = Field(description="LangGraph's task id (deterministic).")
    task_path: str = Field("", description="LangGraph's task path (orders the writes).")
    write_indexes: tuple[int, ...] = Field(
        (),
        description="Index of each write: its position, or LangGraph's negative index of a special channel.",
    )
    channels: tuple[str, ...] = Field((), description="Channel of each write.")
    value_types: tuple[str, ...] = Field((), description="Serde type of each value.")
    values: tuple[bytes, ...] = Field((), description="Serde bytes of each value.")
    kind: Literal["graph_writes"] = Field("graph_writes", description="Always 'graph_writes'.")


class GraphDeleted(AvroModel):
    """A tombstone: checkpoints (and their writes) of a thread that readers no longer see.

    The bytes stay in the log and the archive until retention expires (an immutable log).
    """

    id: str = Field(description="Unique record id (UUID text).")
    conversation_id: str = Field(description="The LangGraph thread id; the Kafka key.")
    tenant_id: str = Field(description="Tenant that owns the conversation.")
    timestamp: AwareDatetime = Field(description="When the deletion was recorded (UTC).")
    reason: str = Field(description="'delete_thread', 'delete_for_runs' or 'prune'.")
    whole_thread: bool = Field(False, description="True: every checkpoint and write of the thread is gone.")
    checkpoint_namespaces: tuple[str, ...] = Field(
        (), description="Namespace of each deleted checkpoint (with `checkpoint_ids`)."
    )
    checkpoint_ids: tuple[str, ...] = Field((), description="Ids of the deleted checkpoints.")
    kind: Literal["graph_deleted"] = Field("graph_deleted", description="Always 'graph_deleted'.")


GraphRecord = GraphCheckpoint | GraphWrites | GraphDeleted
"""Any record of the graph topic."""

GRAPH_TYPES: tuple[type[AvroModel], ...] = (GraphCheckpoint, GraphWrites, GraphDeleted)
"""Every graph-topic record type."""
