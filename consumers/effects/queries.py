"""Reads of the effects projection for the API: the human queue, counts, per-conversation status."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convdb.consumers._rows import from_micros
from convdb.consumers.effects.tables import ledger, operations, runs
from convdb.projections.effects import OperationState, OperationStatus

RUN_STOPPED = frozenset(
    {"idle", "paused", "waiting_for_confirmation", "waiting_for_human", "finished", "error", "stuck"}
)
"""Execution statuses in which the run loop is not running."""


def operation_view(state: OperationState) -> dict[str, Any]:
    """An operation as the API shows it: intent, target, status and the evidence."""
    arguments: Any = state.arguments
    try:
        arguments = json.loads(state.arguments) if state.arguments else None
    except json.JSONDecodeError:
        pass
    return {
        "operation_id": state.operation_id,
        "conversation_id": state.conversation_id,
        "status": state.status.value if state.status else None,
        "intent": {"tool": state.tool_name, "arguments": arguments, "intent_hash": state.intent_hash},
        "target": state.target,
        "effect_class": state.effect_class,
        "attempt": state.attempt,
        "reconcile_after": state.reconcile_after.isoformat() if state.reconcile_after else None,
        "evidence": {
            "reason": state.reason,
            "detail": state.evidence,
            "observed": state.observed,
            "receipt": state.receipt.model_dump(mode="json") if state.receipt else None,
            "provider_receipt": state.provider_receipt,
        },
        "resolution": {"decision": state.decision, "by": state.resolved_by, "note": state.note}
        if state.decision
        else None,
    }


def list_operations(
    conn: Connection,
    tenant_id: str,
    status: str | None,
    after: str | None,
    limit: int,
    conversation_id: str | None = None,
) -> list[OperationState]:
    """A tenant's operations (optionally of one status or conversation), keyset-paginated by operation_id."""
    query = sa.select(operations.c.state).where(operations.c.tenant_id == tenant_id)
    if conversation_id is not None:
        query = query.where(operations.c.conversation_id == conversation_id)
    if status == "parked":
        query = query.where(operations.c.status.is_(None))
    elif status is not None:
        query = query.where(operations.c.status == status)
    else:
        query = query.where(operations.c.status.is_not(None))
    if after:
        query = query.where(operations.c.operation_id > after)
    query = query.order_by(operations.c.operation_id).limit(limit)
    return [OperationState.model_validate_json(s) for (s,) in conn.execute(query)]


def get_operation(conn: Connection, operation_id: str) -> OperationState | None:
    """One operation's state, whatever its tenant (the caller checks the tenant)."""
    row = conn.execute(sa.select(operations.c.state).where(operations.c.operation_id == operation_id)).first()
    return None if row is None else OperationState.model_validate_json(row[0])


def operation_ledger(conn: Connection, operation_id: str) -> list[dict[str, Any]]:
    """An operation's distinct ledger records, oldest first."""
    query = (
        sa.select(ledger.c.kind, ledger.c.by, ledger.c.timestamp_us, ledger.c.payload)
        .where(ledger.c.operation_id == operation_id)
        .order_by(ledger.c.timestamp_us, ledger.c.partition, ledger.c.offset)
    )
    return [
        {"kind": k, "by": by, "timestamp": from_micros(t).isoformat(), "record": json.loads(p)}
        for k, by, t, p in conn.execute(query)
    ]


def counts_by_status(conn: Connection, tenant_id: str | None = None) -> dict[str, int]:
    """Operations per status (every status present, zeros included)."""
    query = sa.select(operations.c.status, sa.func.count()).where(operations.c.status.is_not(None))
    if tenant_id is not None:
        query = query.where(operations.c.tenant_id == tenant_id)
    counts = {s.value: 0 for s in OperationStatus}
    counts.update(dict(conn.execute(query.group_by(operations.c.status)).all()))
    return counts


def parked_receipts(conn: Connection, tenant_id: str) -> int:
    """Receipts held for operations the read side has not seen proposed (status `parked`)."""
    query = sa.select(sa.func.count()).where(
        operations.c.tenant_id == tenant_id, operations.c.status.is_(None)
    )
    return int(conn.execute(query).scalar() or 0)


def counts_by_conversation(
    conn: Connection, tenant_id: str, conversation_ids: list[str]
) -> dict[str, dict[str, int]]:
    """Operations per status of each of these conversations of the tenant (zeros included)."""
    found: dict[str, dict[str, int]] = {c: {s.value: 0 for s in OperationStatus} for c in conversation_ids}
    if not conversation_ids:
        return found
    o = operations.c
    query = (
        sa.select(o.conversation_id, o.status, sa.func.count())
        .where(o.tenant_id == tenant_id, o.conversation_id.in_(conversation_ids), o.status.is_not(None))
        .group_by(o.conversation_id, o.status)
    )
    for conversation_id, status, count in conn.execute(query):
        found[conversation_id][status] = count
    return found


def conversation_status(conn: Connection, conversation_id: str) -> dict[str, Any] | None:
    """The three facts never collapsed into one tick: agent says done, run stopped, effects confirmed."""
    run = conn.execute(sa.select(runs).where(runs.c.conversation_id == conversation_id)).mappings().first()
    query = (
        sa.select(operations.c.status, sa.func.count())
        .where(operations.c.conversation_id == conversation_id, operations.c.status.is_not(None))
        .group_by(operations.c.status)
    )
    counts = {s.value: 0 for s in OperationStatus}
    counts.update(dict(conn.execute(query).all()))
    if run is None and not any(counts.values()):
        return None
    tenant = run["tenant_id"] if run else _tenant_of_operations(conn, conversation_id)
    status = run["execution_status"] if run else None
    total = sum(counts.values())
    return {
        "conversation_id": conversation_id,
        "tenant_id": tenant,
        "agent_says_done": bool(run and run["last_answer_seq"] > run["last_action_seq"]),
        "run_loop_stopped": status in RUN_STOPPED,
        "execution_status": status,
        "effects_all_confirmed": counts["confirmed"] == total,
        "effects": counts,
    }


def _tenant_of_operations(conn: Connection, conversation_id: str) -> str | None:
    row = conn.execute(
        sa.select(operations.c.tenant_id).where(operations.c.conversation_id == conversation_id).limit(1)
    ).first()
    return None if row is None else row[0]
