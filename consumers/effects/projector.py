"""The effects consumer: folds `convdb.projections.effects` per operation into the store (DESIGN §8).

Reads the effects ledger, the events (intent of each action, observations, the run's status
and the agent's answers) and provider receipts. A repeated ledger record (the at-least-once
reconciler, a redelivery) is dropped by id, both by the fold and by the ledger table's key. An
event is first folded into its conversation's chain (`convdb.consumers._chains`): one of another tenant,
after a gap or at a seq taken by another event is refused, as by every other projection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from convdb.consumers._chains import Chains
from convdb.consumers._rows import micros
from convdb.consumers.base import Batch, ConsumedRecord, DigestOf, Rejection, TableProjector, load_rows
from convdb.consumers.effects.tables import chains, ledger, metadata, operations, runs
from convdb.consumers.store import insert_ignore, upsert
from convdb.projections import effects
from convdb.schemas import ActionEvent, LedgerRecord, MessageEvent, StateUpdateEvent
from convdb.schemas.topics import EFFECTS, EVENTS, RECEIPTS


class EffectsConsumer(TableProjector):
    """Projector `effects`: the ledger per operation, counts by status, the queue of unknowns."""

    name = "effects"
    topics = (EFFECTS, EVENTS, RECEIPTS)
    version = 2
    metadata = metadata
    digest_of = (DigestOf(operations, ("state",), ("operation_id",)), DigestOf(runs))

    def apply(self, connection: Connection, batch: Sequence[ConsumedRecord]) -> Sequence[Rejection]:
        """Fold the batch into the touched operations and conversations; return refused records."""
        batch = Batch.of(batch)
        op_ids = {i for r in batch if (i := effects.operation_id_of(r.value))}
        states = load_operations(connection, sorted(op_ids))
        run_rows = load_runs(connection, sorted({r.key for r in batch if _is_run_fact(r.value)}))
        convs = Chains.load(connection, chains, list(batch.by_conversation()))
        events = {id(r) for r in batch.events()}
        before = dict(states)
        rejected: list[Rejection] = []
        ledger_rows = []
        for record in batch:
            value = record.value
            try:
                step = convs.step(value) if id(record) in events else None  # type: ignore[arg-type]
                if step is None and id(record) in events:
                    continue  # a redelivered event: folded already
                op_id = effects.operation_id_of(value)
                if op_id is not None:
                    states[op_id] = effects.fold(states.get(op_id) or effects.initial(op_id), value)
            except Exception as exc:  # noqa: BLE001 - the pure fold's refusal, or its overflow on a value
                rejected.append(Rejection(record, exc))
                continue  # refused: none of it is written, run facts included
            if step is not None:
                convs.advance(step)
            if isinstance(value, LedgerRecord):
                ledger_rows.append(_ledger_row(record, value))
            if _is_run_fact(value):
                _fold_run(run_rows, value)
        changed = [to_row(s) for op, s in states.items() if s is not before.get(op) and s.conversation_id]
        upsert(connection, operations, changed, ["operation_id"])
        insert_ignore(connection, ledger, ledger_rows, ["id"])
        upsert(connection, runs, list(run_rows.values()), ["conversation_id"])
        convs.write(connection)
        return rejected


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
        "kind": value.kind,
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
    rows = load_rows(connection, operations, op_ids, key="operation_id")
    return {op_id: effects.OperationState.model_validate_json(row["state"]) for op_id, row in rows.items()}


def load_runs(connection: Connection, convs: list[str]) -> dict[str, dict[str, Any]]:
    """Stored run facts of these conversations."""
    return {conv: dict(row) for conv, row in load_rows(connection, runs, convs).items()}
