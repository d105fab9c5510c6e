"""Post a user message to a conversation: an `InboxMessage` on the inbox topic, durable before 202."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from consumers.api.deps import Conn, Ctx, Tenant
from consumers.views.tables import conversations as views_table
from schemas import InboxMessage
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
    owner = conn.execute(
        sa.select(views_table.c.tenant_id).where(views_table.c.conversation_id == conversation_id)
    ).scalar()
    if owner is not None and owner != tenant_id:
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    message = InboxMessage(
        id=str(uuid.uuid4()),
        conversation_id=conversation_id,
        tenant_id=tenant_id,
        timestamp=datetime.now(UTC),
        command="message",
        content=body.content,
        sender=body.sender,
    )
    (delivery,) = ctx.publish([(INBOX, message)])
    return Accepted(
        id=message.id,
        conversation_id=conversation_id,
        topic=delivery.topic,
        partition=delivery.partition,
        offset=delivery.offset,
    )
