"""Post a user message (or a pause/resume command) to a conversation: an `InboxMessage` on the inbox
topic, durable before 202."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.engine import Connection

from consumers.api.deps import ApiContext, Conn, Ctx, Tenant
from consumers.views.tables import conversations as views_table
from schemas import InboxMessage
from schemas._types import InboxCommand
from schemas.topics import INBOX

router = APIRouter(tags=["messages"])


class PostMessage(BaseModel):
    """A user message for a conversation."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, max_length=100_000, description="Message text.")
    sender: str = Field("user", min_length=1, max_length=200, description="Who sends it.")


class Accepted(BaseModel):
    """Where the message was stored: it is durable in the inbox topic."""

    id: str
    conversation_id: str
    topic: str
    partition: int
    offset: int


@router.post(
    "/conversations/{conversation_id}/messages",
    status_code=202,
    response_model=Accepted,
    summary="Send a user message (durable in the inbox before 202)",
)
def post_message(
    conversation_id: str, body: PostMessage, tenant_id: Tenant, conn: Conn, ctx: Ctx
) -> Accepted:
    """Queue a message for a conversation (it may not have started yet); 404 if another tenant owns it."""
    return send_to_inbox(conn, ctx, tenant_id, conversation_id, "message", body.content, body.sender)


@router.post(
    "/conversations/{conversation_id}/pause",
    status_code=202,
    response_model=Accepted,
    summary="Pause a conversation (a command in the inbox, durable before 202)",
)
def post_pause(conversation_id: str, tenant_id: Tenant, conn: Conn, ctx: Ctx) -> Accepted:
    """Ask the conversation's runner to pause it after the current step; 404 unless the tenant has it."""
    return send_to_inbox(conn, ctx, tenant_id, conversation_id, "pause", "", "user", must_exist=True)


@router.post(
    "/conversations/{conversation_id}/resume",
    status_code=202,
    response_model=Accepted,
    summary="Resume a paused conversation (a command in the inbox, durable before 202)",
)
def post_resume(conversation_id: str, tenant_id: Tenant, conn: Conn, ctx: Ctx) -> Accepted:
    """Ask the runner to resume the conversation (or confirm a pending action); 404 unless the tenant's."""
    return send_to_inbox(conn, ctx, tenant_id, conversation_id, "resume", "", "user", must_exist=True)


def send_to_inbox(
    conn: Connection,
    ctx: ApiContext,
    tenant_id: str,
    conversation_id: str,
    command: InboxCommand,
    content: str,
    sender: str,
    *,
    must_exist: bool = False,
) -> Accepted:
    """Publish an `InboxMessage` (durable before return); HTTPException 404 if not the tenant's.

    Raises:
        PublishError: not acknowledged in time (the app answers 503).
    """
    owner = conn.execute(
        sa.select(views_table.c.tenant_id).where(views_table.c.conversation_id == conversation_id)
    ).scalar()
    if (owner is not None and owner != tenant_id) or (owner is None and must_exist):
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    message = InboxMessage(
        id=str(uuid.uuid4()),
        conversation_id=conversation_id,
        tenant_id=tenant_id,
        timestamp=datetime.now(UTC),
        command=command,
        content=content,
        sender=sender,
    )
    (delivery,) = ctx.publish([(INBOX, message)])
    return Accepted(
        id=message.id,
        conversation_id=conversation_id,
        topic=delivery.topic,
        partition=delivery.partition,
        offset=delivery.offset,
    )
