"""Tables of the effects projection: operations, their ledger, and per-conversation run facts.

Ids fit the validation layer's limits and texts are unbounded, so that the store never refuses a
value the schemas allow (PostgreSQL enforces VARCHAR lengths, SQLite does not).
"""

from __future__ import annotations

import sqlalchemy as sa

from convdb.consumers._chains import chain_table
from convdb.schemas.validation import MAX_ID, MAX_OPERATION_ID

metadata = sa.MetaData()

operations = sa.Table(
    "effects_operations",
    metadata,
    sa.Column("operation_id", sa.String(MAX_OPERATION_ID), primary_key=True),
    sa.Column("conversation_id", sa.String(200), nullable=False),
    sa.Column("tenant_id", sa.String(200), nullable=False),
    sa.Column("status", sa.String(20), doc="None while only evidence (receipt, action) is known."),
    sa.Column("tool_name", sa.Text, nullable=False),
    sa.Column("effect_class", sa.String(20)),
    sa.Column("target", sa.Text),
    sa.Column("updated_us", sa.BigInteger, doc="Timestamp of the last ledger record folded."),
    sa.Column("state", sa.Text, nullable=False, doc="The OperationState as JSON (rebuilds the fold)."),
    sa.Index("effects_operations_queue", "tenant_id", "status", "operation_id"),
    sa.Index("effects_operations_conversation", "conversation_id", "operation_id"),
)
"""One row per operation: its folded state."""

ledger = sa.Table(
    "effects_ledger",
    metadata,
    sa.Column("id", sa.String(MAX_ID), primary_key=True, doc="Ledger record id: a repeated id is dropped."),
    sa.Column("operation_id", sa.String(MAX_OPERATION_ID), nullable=False),
    sa.Column("conversation_id", sa.String(200), nullable=False),
    sa.Column("tenant_id", sa.String(200), nullable=False),
    sa.Column("kind", sa.String(40), nullable=False),
    sa.Column("by", sa.Text, nullable=False, doc="origin, or resolved_by for a resolution."),
    sa.Column("timestamp_us", sa.BigInteger, nullable=False),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("offset", sa.BigInteger, nullable=False),
    sa.Column("payload", sa.Text, nullable=False, doc="The ledger record as JSON."),
    sa.Index("effects_ledger_operation", "operation_id", "timestamp_us"),
)
"""Every distinct ledger record, per operation (the operation's history)."""

runs = sa.Table(
    "effects_runs",
    metadata,
    sa.Column("conversation_id", sa.String(200), primary_key=True),
    sa.Column("tenant_id", sa.String(200), nullable=False),
    sa.Column("execution_status", sa.String(40), doc="Last StateUpdateEvent's status."),
    sa.Column("last_action_seq", sa.BigInteger, nullable=False),
    sa.Column("last_answer_seq", sa.BigInteger, nullable=False, doc="seq of the agent's last message."),
)
"""Per conversation, what the log says about the run (agent answer, run loop status)."""

chains = chain_table("effects_conversations", metadata)
"""Per conversation, its chain (`convdb.projections.chain`): the events the effects fold admits."""
