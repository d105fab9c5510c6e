"""Branch a conversation or fork it into a new one: commands in the inbox, durable before 202.

The runner that owns the conversation (for a fork: the new one) carries them out and is the final
judge: it dead-letters a command the log refuses. What the read side already knows is refused
here first: a seq with no event (or a branch switch there), a fork target that exists.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException
from fastapi.concurrency import run_in_threadpool
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from convdb.consumers.api.deps import ApiContext, Ctx, Tenant
from convdb.consumers.api.messages import Accepted, send_to_inbox
from convdb.consumers.api.params import AUTHENTICATED, MAX_INT64, ConversationIdPath, problems
from convdb.consumers.views.queries import branch_head, event_at_seq
from convdb.schemas.validation import CONVERSATION_ID_PATTERN, MAX_ID, check_conversation_id

router = APIRouter(tags=["messages"], responses={**AUTHENTICATED, **problems(404, 503)})

AtSeq = Annotated[
    int, Field(ge=1, le=MAX_INT64, description="seq of an event of the conversation (1 = first).")
]
"""Where a branch starts or a fork continues."""


class PostBranch(BaseModel):
    """Make an earlier event the active leaf: the agent reads the branch ending there."""

    model_config = ConfigDict(extra="forbid")

    at_seq: AtSeq


class PostFork(BaseModel):
    """Start a new conversation that continues after an event of this one."""

    model_config = ConfigDict(extra="forbid")

    at_seq: AtSeq
    new_conversation_id: Annotated[
        str | None,
        Field(
            None,
            description="Id of the new conversation (none: convdb draws a UUID); must not exist yet.",
            max_length=MAX_ID,
            pattern=CONVERSATION_ID_PATTERN,
        ),
        AfterValidator(lambda v: v if v is None else check_conversation_id(v)),
    ] = None


@router.post(
    "/conversations/{conversation_id}/branch",
    status_code=202,
    response_model=Accepted,
    summary="Switch the active leaf to an earlier event (a command in the inbox, durable before 202)",
    responses=problems(400),
)
async def post_branch(
    conversation_id: ConversationIdPath, body: PostBranch, tenant_id: Tenant, ctx: Ctx
) -> Accepted:
    """The next message starts a new branch after event `at_seq` (one that is a user message is
    answered again there); 404 unless the tenant has the conversation, 400 for a seq with no event."""
    await run_in_threadpool(check_seq, ctx, tenant_id, conversation_id, body.at_seq)
    return await send_to_inbox(
        ctx, tenant_id, conversation_id, "branch", "", "user", must_exist=True, at_seq=body.at_seq
    )


@router.post(
    "/conversations/{conversation_id}/fork",
    status_code=202,
    response_model=Accepted,
    summary="Fork into a new conversation after an event (a command in its inbox, durable before 202)",
    responses=problems(400, 409),
)
async def post_fork(
    conversation_id: ConversationIdPath, body: PostFork, tenant_id: Tenant, ctx: Ctx
) -> Accepted:
    """A new conversation whose agent reads this one's path up to `at_seq`, then its own events; the
    answer's `conversation_id` is the new one. 404 unless the tenant has the source, 400 for a seq
    with no event, 409 when the new id is taken."""
    await run_in_threadpool(check_seq, ctx, tenant_id, conversation_id, body.at_seq)
    new = body.new_conversation_id or str(uuid.uuid4())
    if new == conversation_id:
        raise HTTPException(409, f"conversation {new!r} already exists: a fork needs a new id")
    return await send_to_inbox(
        ctx, tenant_id, new, "fork", "", "user",
        must_be_new=True, fresh=body.new_conversation_id is None,
        at_seq=body.at_seq, source_conversation_id=conversation_id,
    )  # fmt: skip


def check_seq(ctx: ApiContext, tenant_id: str, conversation_id: str, seq: int) -> None:
    """Refuse a seq the read side knows has no event a branch can start from.

    Raises:
        HTTPException: 404 unless the tenant has the conversation; 400 for a seq past its last
            event (as far as the read side has folded), or one of a branch switch.
    """
    with ctx.engine.connect() as conn:
        head = branch_head(conn, tenant_id, conversation_id)
        if head is None:
            raise HTTPException(404, f"no conversation {conversation_id!r}")
        if seq > head.last_seq:
            raise HTTPException(
                400,
                f"no event #{seq} in conversation {conversation_id!r}: its events are #1 to #{head.last_seq}",
            )
        event: dict[str, Any] | None = event_at_seq(conn, conversation_id, seq)
    if event is not None and event.get("kind") == "active_leaf_changed":
        raise HTTPException(
            400, f"event #{seq} of {conversation_id!r} is a branch switch: pick an event of a branch"
        )
