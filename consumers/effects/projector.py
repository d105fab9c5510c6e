"""The effects consumer: folds `projections.effects` per operation into the store (DESIGN §8).

Reads the effects ledger, the events (intent of each action, observations, the run's status
and the agent's answers) and provider receipts. A repeated ledger record (the at-least-once
reconciler, a redelivery) is dropped by id, both by the fold and by the ledger table's key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from consumers._rows import micros
from consumers.base import ConsumedRecord
from consumers.effects.tables import ledger, metadata, operations, runs
from consumers.errors import RecordsRejectedError
from consumers.store import insert_ignore, upsert
from infra.settings import Settings
from projections import effects
from projections.errors import ProjectionError
from schemas import ActionEvent, LedgerRecord, MessageEvent, StateUpdateEvent
from schemas.topics import EFFECTS, EVENTS, RECEIPTS

CHUNK = 500


class EffectsConsumer:
    """Projector `effects`: the ledger per operation, counts by status, the queue of unknowns."""

    name = "effects"
    topics = (EFFECTS, EVENTS, RECEIPTS)
    version = 1

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings

    def create(self, connection: Connection) -> None:
        """Create the effects tables (idempotent)."""
        metadata.create_all(connection)

    def drop(self, connection: Connection) -> None:
        """Drop the effects tables."""
        metadata.drop_all(connection)

    def apply(self, connection: Connection, records: Sequence[ConsumedRecord]) -> None:
        """Fold the batch into the touched operations and conversations."""
        op_ids = {i for r in records if (i := effects.operation_id_of(r.value))}
        states = load_operations(connection, sorted(op_ids))
        run_rows = load_runs(connection, sorted({r.key for r in records if _is_run_fact(r.value)}))
        before = dict(states)
        rejected: list[tuple[ConsumedRecord, BaseException]] = []
        ledger_rows = []
        for record in records:
            value = record.value
            if _is_run_fact(value):
                _fold_run(run_rows, value)
            op_id = effects.operation_id_of(value)
            if op_id is None:
                continue
            try:
                states[op_id] = effects.fold(states.get(op_id) or effects.initial(op_id), value)
            except ProjectionError as exc:
                rejected.append((record, exc))
                continue
            if isinstance(value, LedgerRecord):
                ledger_rows.append(_ledger_row(record, value))
        if rejected:
            raise RecordsRejectedError(rejected)
        changed = [to_row(s) for op, s in states.items() if s is not before.get(op) and s.conversation_id]
        upsert(connection, operations, changed, ["operation_id"])
        insert_ignore(connection, ledger, ledger_rows, ["id"])
        upsert(connection, runs, list(run_rows.values()), ["conversation_id"])

    def digests(self, connection: Connection) -> dict[str, str]:
        """Per-conversation digest of its operations' states and its run facts."""
        parts: dict[str, list[str]] = {}
        query = sa.select(operations.c.conversation_id, operations.c.state).order_by(
            operations.c.operation_id
        )
        for conv, state in connection.execute(query):
            parts.setdefault(conv, []).append(state)
        for row in connection.execute(sa.select(runs)).mappings():
            parts.setdefault(row["conversation_id"], []).append(json.dumps(dict(row), sort_keys=True))
        return {conv: hashlib.sha256("\n".join(p).encode()).hexdigest() for conv, p in parts.items()}


def _is_run_fact(value: object) -> bool:
    return isinstance(value, ActionEvent | StateUpdateEvent) or (
        isinstance(value, MessageEvent) and value.role == "assistant"
    )


def _fold_run(rows: dict[str, dict[str, Any]], event: Any) -> None:
    row = rows.setdefault(
        event.conversation_id,
        {
            "conversation_id": event.conversation_id,
            "tenant_id": event.tenant_id,
            "execution_status": None,
            "last_action_seq": 0,
            "last_answer_seq": 0,
        },
    )
    if isinstance(event, StateUpdateEvent):
        row["execution_status"] = event.execution_status
    elif isinstance(event, ActionEvent):
        row["last_action_seq"] = max(row["last_action_seq"], event.seq)
    else:
        row["last_answer_seq"] = max(row["last_answer_seq"], event.seq)


def _ledger_row(record: ConsumedRecord, value: LedgerRecord) -> dict[str, Any]:
    by = getattr(value, "origin", None) or getattr(value, "resolved_by", None) or "runner"
    return {
        "id": value.id,
        "operation_id": value.operation_id,
        "conversation_id": value.conversation_id,
        "tenant_id": value.tenant_id,
        "kind": value.kind,  # type: ignore[attr-defined]
        "by": by,
        "timestamp_us": micros(value.timestamp),
        "partition": record.partition,
        "offset": record.offset,
        "payload": value.model_dump_json(),
    }


def to_row(state: effects.OperationState) -> dict[str, Any]:
    """The table row of an operation's state."""
    return {
        "operation_id": state.operation_id,
        "conversation_id": state.conversation_id,
        "tenant_id": state.tenant_id,
        "status": state.status.value if state.status else None,
        "tool_name": state.tool_name,
        "effect_class": state.effect_class,
        "target": state.target,
        "updated_us": micros(state.updated_at) if state.updated_at else None,
        "state": state.model_dump_json(),
    }


def load_operations(connection: Connection, op_ids: list[str]) -> dict[str, effects.OperationState]:
    """Stored states of these operations (missing ones are absent)."""
    found = {}
    for start in range(0, len(op_ids), CHUNK):
        chunk = op_ids[start : start + CHUNK]
        query = sa.select(operations.c.operation_id, operations.c.state).where(
            operations.c.operation_id.in_(chunk)
        )
        for op_id, state in connection.execute(query):
            found[op_id] = effects.OperationState.model_validate_json(state)
    return found


def load_runs(connection: Connection, convs: list[str]) -> dict[str, dict[str, Any]]:
    """Stored run facts of these conversations."""
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(convs), CHUNK):
        query = sa.select(runs).where(runs.c.conversation_id.in_(convs[start : start + CHUNK]))
        for row in connection.execute(query).mappings():
            found[row["conversation_id"]] = dict(row)
    return found
