"""The human queue and effect status: operations per tenant, resolve an unknown, conversation status.

A decision is published twice, on purpose: an `EffectResolved` on the effects topic (so the
queue and the ledger show it at once; its id is derived from operation + attempt, so of two
racing decisions readers keep the first) and an `InboxMessage(command="resolve")` that wakes
the conversation's runner, which records the decision in its own ledger and continues.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from fastapi import APIRouter, HTTPException
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from convdb.consumers.api.deps import ApiContext, Conn, Ctx, Tenant
from convdb.consumers.api.params import (
    AUTHENTICATED,
    ConversationIdPath,
    ConversationIdQuery,
    KeysetQuery,
    LimitQuery,
    Note,
    OperationIdPath,
    problems,
)
from convdb.consumers.effects import (
    conversation_status,
    counts_by_status,
    get_operation,
    list_operations,
    operation_ledger,
    operation_view,
    parked_receipts,
)
from convdb.projections.effects import OperationState, OperationStatus, transition_id
from convdb.schemas import EffectResolved, InboxMessage
from convdb.schemas.topics import EFFECTS, INBOX

router = APIRouter(tags=["effects"], responses=AUTHENTICATED)

Status = Literal["proposed", "executing", "confirmed", "failed", "unknown", "parked"]
"""An operation status; `parked`: a receipt for an operation not (yet) seen proposed, kept apart."""


class Resolve(BaseModel):
    """A human's decision on an operation whose outcome is unknown."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["confirmed", "failed", "retry"] = Field(
        description="confirmed: it happened; failed: it did not and must not be retried; retry: run it again."
    )
    note: Note = ""


@router.get("/operations", summary="the tenant's operations; status=unknown is the human queue")
def operations(
    tenant: Tenant,
    conn: Conn,
    status: Status | None = None,
    after: KeysetQuery = None,
    limit: LimitQuery = 50,
    conversation_id: ConversationIdQuery = None,
) -> dict[str, Any]:
    """Operations with intent (tool + arguments), target and evidence, plus counts by status."""
    states = list_operations(conn, tenant, status, after, limit, conversation_id)
    return {
        "operations": [operation_view(s) for s in states],
        "next": states[-1].operation_id if len(states) == limit else None,
        "counts": counts_by_status(conn, tenant),
        "parked_receipts": parked_receipts(conn, tenant),
    }


def owned_operation(conn: Any, tenant: str, operation_id: str) -> OperationState:
    """The tenant's operation; HTTPException 404 when it does not exist for this tenant."""
    state = get_operation(conn, operation_id)
    if state is None or state.status is None or state.tenant_id != tenant:
        raise HTTPException(404, f"no operation {operation_id!r}")
    return state


@router.post(
    "/operations/{operation_id:path}/resolve",
    status_code=202,
    responses=problems(404, 409, 503),
    summary="decide an unknown operation: confirmed, failed, or retry",
)
async def resolve(
    operation_id: OperationIdPath, body: Resolve, tenant: Tenant, conn: Conn, ctx: Ctx
) -> dict[str, Any]:
    """Record the decision on the ledger and wake the conversation's runner; 409 unless unknown."""
    state = owned_operation(conn, tenant, operation_id)
    resolved = await record_decision(ctx, state, body, f"human:{tenant}")
    return {"operation_id": operation_id, "decision": body.decision, "ledger_id": resolved.id}


async def record_decision(ctx: ApiContext, state: OperationState, body: Resolve, by: str) -> EffectResolved:
    """Publish a human's decision (ledger first, then the runner's wake-up); 409 unless unknown."""
    operation_id = state.operation_id
    if state.status is not OperationStatus.UNKNOWN:
        raise HTTPException(
            409, f"operation {operation_id} is {state.status}, not unknown: nothing to decide"
        )
    now = datetime.now(UTC)
    resolved = EffectResolved(
        id=transition_id(operation_id, f"human@{state.attempt}"),
        operation_id=operation_id,
        conversation_id=state.conversation_id,
        tenant_id=state.tenant_id,
        timestamp=now,
        decision=body.decision,
        resolved_by=by,
        note=body.note,
    )
    wake = InboxMessage(
        id=str(uuid.uuid4()),
        conversation_id=state.conversation_id,
        tenant_id=state.tenant_id,
        timestamp=now,
        command="resolve",
        content=body.decision,
        sender=by,
        operation_id=operation_id,
    )
    # Redaction reads the whole note: on a worker thread, not on the event loop every tenant shares.
    resolved = await run_in_threadpool(ctx.secrets.redact_record, resolved)
    # The decision is durable on the ledger before the runner is woken to act on it.
    await ctx.publish_async([(EFFECTS, resolved)])
    await ctx.publish_async([(INBOX, wake)])
    return resolved


@router.get(
    "/operations/{operation_id:path}", summary="one operation with its ledger", responses=problems(404)
)
def operation(operation_id: OperationIdPath, tenant: Tenant, conn: Conn) -> dict[str, Any]:
    """An operation's intent, status, evidence and every distinct ledger record."""
    state = owned_operation(conn, tenant, operation_id)
    return {**operation_view(state), "ledger": operation_ledger(conn, operation_id)}


@router.get(
    "/conversations/{conversation_id}/status",
    summary="done? stopped? effects confirmed?",
    responses=problems(404),
)
def status(conversation_id: ConversationIdPath, tenant: Tenant, conn: Conn) -> dict[str, Any]:
    """Three separate facts, never one green tick: agent says done, run loop stopped, effects confirmed."""
    found = conversation_status(conn, conversation_id)
    if found is None or found["tenant_id"] != tenant:
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    return found
