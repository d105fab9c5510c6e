"""Post a user message (or a pause/resume/cancel command) to a conversation: an `InboxMessage` on the inbox
topic, durable before 202."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from convdb.consumers.api.deps import ApiContext, Ctx, Tenant
from convdb.consumers.api.ownership import OwnershipUnknownError
from convdb.consumers.api.params import AUTHENTICATED, ConversationIdPath, MessageText, Sender, problems
from convdb.infra.agent_names import is_agent_name, unknown_agent_message
from convdb.schemas import InboxMessage
from convdb.schemas._types import InboxCommand
from convdb.schemas.topics import INBOX

router = APIRouter(tags=["messages"], responses={**AUTHENTICATED, **problems(404, 503)})


class PostMessage(BaseModel):
    """A user message for a conversation."""

    model_config = ConfigDict(extra="forbid")

    content: MessageText
    sender: Sender = "user"
    agent: str | None = Field(
        None,
        description="Agent to run the conversation: 'default' or an agent installed with convdb (a name "
        "from the 'convdb.agents' entry points). The first message chooses; a later one names the same "
        "or none. None: the runner's default agent.",
        max_length=300,
    )


class Accepted(BaseModel):
    """Where the message was stored: it is durable in the inbox topic."""

    id: str
    conversation_id: str
    topic: str
    partition: int
    offset: int


@router.post(
    "/conversations",
    status_code=202,
    response_model=Accepted,
    summary="Start a conversation under a new id convdb chooses (its first message, durable before 202)",
)
async def start_conversation(body: PostMessage, tenant_id: Tenant, ctx: Ctx) -> Accepted:
    """A conversation under a fresh, unguessable id (a UUID): no other tenant can hold it, and a
    client learns nothing about the ids other tenants use (ids a client chooses itself are one
    namespace for every tenant: a post to one taken by another tenant is answered 404)."""
    new = str(uuid.uuid4())
    agent = checked_agent(body.agent)
    return await send_to_inbox(
        ctx, tenant_id, new, "message", body.content, body.sender, fresh=True, agent=agent
    )


@router.post(
    "/conversations/{conversation_id}/messages",
    status_code=202,
    response_model=Accepted,
    summary="Send a user message (durable in the inbox before 202)",
)
async def post_message(
    conversation_id: ConversationIdPath, body: PostMessage, tenant_id: Tenant, ctx: Ctx
) -> Accepted:
    """Queue a message for a conversation (it may not have started yet); 404 if another tenant owns it,
    400 for an agent that is not installed here (a message never names module:attr)."""
    agent = checked_agent(body.agent)
    return await send_to_inbox(
        ctx, tenant_id, conversation_id, "message", body.content, body.sender, agent=agent
    )


def checked_agent(agent: str | None) -> str | None:
    """`agent` when a runner could load it; HTTPException 400 with the known names otherwise."""
    if agent is not None and not is_agent_name(agent):
        raise HTTPException(400, unknown_agent_message(agent))
    return agent


@router.post(
    "/conversations/{conversation_id}/pause",
    status_code=202,
    response_model=Accepted,
    summary="Pause a conversation (a command in the inbox, durable before 202)",
)
async def post_pause(conversation_id: ConversationIdPath, tenant_id: Tenant, ctx: Ctx) -> Accepted:
    """Ask the conversation's runner to pause it after the current step; 404 unless the tenant has it."""
    return await send_to_inbox(ctx, tenant_id, conversation_id, "pause", "", "user", must_exist=True)


@router.post(
    "/conversations/{conversation_id}/resume",
    status_code=202,
    response_model=Accepted,
    summary="Resume a paused conversation (a command in the inbox, durable before 202)",
)
async def post_resume(conversation_id: ConversationIdPath, tenant_id: Tenant, ctx: Ctx) -> Accepted:
    """Ask the runner to resume the conversation (or confirm a pending action); 404 unless the tenant's."""
    return await send_to_inbox(ctx, tenant_id, conversation_id, "resume", "", "user", must_exist=True)


@router.post(
    "/conversations/{conversation_id}/cancel",
    status_code=202,
    response_model=Accepted,
    summary="Cancel a run and the task tree below it (a command in the inbox, durable before 202)",
)
async def post_cancel(conversation_id: ConversationIdPath, tenant_id: Tenant, ctx: Ctx) -> Accepted:
    """Ask the runner to end the conversation's run (status `error`, reason `cancelled by user`) and
    to cancel every child still working below it (each reports `cancelled` to its parent); 404
    unless the tenant has it."""
    return await send_to_inbox(ctx, tenant_id, conversation_id, "cancel", "", "user", must_exist=True)


async def send_to_inbox(
    ctx: ApiContext,
    tenant_id: str,
    conversation_id: str,
    command: InboxCommand,
    content: str,
    sender: str,
    *,
    must_exist: bool = False,
    must_be_new: bool = False,
    fresh: bool = False,
    agent: str | None = None,
    **fields: Any,
) -> Accepted:
    """Publish an `InboxMessage` (durable before return); HTTPException 404 if not the tenant's.

    `fresh`: the id was just drawn at random (a UUID), so nobody can own it yet. `must_be_new`:
    409 when anyone holds the id already (a fork's target). `fields`: more `InboxMessage` fields.

    Raises:
        PublishError: not acknowledged in time (the app answers 503).
    """
    owner, claim = None, None
    if not fresh:
        try:
            owner, claim = await ctx.on_writer(ctx.ownership.owner, conversation_id)
        except OwnershipUnknownError as exc:
            raise HTTPException(503, f"cannot tell who owns {conversation_id!r} now: {exc}") from exc
    if must_be_new and owner is not None:
        raise HTTPException(409, f"conversation {conversation_id!r} already exists")
    # "Not yours" and "does not exist" are the same answer, so neither can be probed.
    if (owner is not None and owner != tenant_id) or (owner is None and must_exist):
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    # Redaction reads the whole text: on a worker thread, not on the event loop every tenant shares.
    message = await run_in_threadpool(
        ctx.secrets.redact_record,
        InboxMessage(
            id=str(uuid.uuid4()),
            conversation_id=conversation_id,
            tenant_id=tenant_id,
            timestamp=datetime.now(UTC),
            command=command,
            content=content,
            sender=sender,
            agent=agent,
            **fields,
        ),
    )
    (delivery,) = await ctx.publish_async([(INBOX, message)])
    if owner is None and claim is not None:
        # A new conversation: another tenant's post may have won the race for this id.
        won = await ctx.on_writer(
            ctx.ownership.confirm_claim, claim, conversation_id, tenant_id, delivery.offset
        )
        if not won and must_be_new:
            raise HTTPException(409, f"conversation {conversation_id!r} already exists")
        if not won:
            raise HTTPException(404, f"no conversation {conversation_id!r}")
    return Accepted(
        id=message.id,
        conversation_id=conversation_id,
        topic=delivery.topic,
        partition=delivery.partition,
        offset=delivery.offset,
    )
