"""Fork or branch from an event of the timeline: a page that shows the event and the two choices,
and the two forms it posts (each calls the JSON API's own checks and `send_to_inbox`)."""

from __future__ import annotations

import uuid
from urllib.parse import quote, urlencode

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from convdb.consumers.api.deps import Conn, context
from convdb.consumers.api.history import check_seq
from convdb.consumers.api.messages import send_to_inbox
from convdb.consumers.console.actions import _checked, _unavailable
from convdb.consumers.console.render import redirect, render
from convdb.consumers.console.web import current_user, error_page, login_redirect, page_context
from convdb.consumers.views.queries import branch_head, event_at_seq
from convdb.infra.errors import PublishError
from convdb.schemas.validation import conversation_id_problem, shown

router = APIRouter(include_in_schema=False)

MAX_SEQ = 2**63 - 1


def _seq(text: str | None) -> int:
    """The event's seq from a query or form field; HTTPException 400 when it is none."""
    value = (text or "").strip()
    if not value.isascii() or not value.isdigit() or len(value) > 19 or not 1 <= int(value) <= MAX_SEQ:
        raise HTTPException(400, f"the event's seq must be a whole number from 1, not {shown(text or '')}")
    return int(value)


@router.get("/console/conversations/{conversation_id}/fork", summary="console: fork or branch from an event")
def fork_page(request: Request, conversation_id: str, conn: Conn, seq: str | None = None) -> Response:
    """The event at `seq` and the two things that can start from it: a fork, a branch."""
    user = current_user(request)
    if user is None:
        return login_redirect()
    try:
        at = _seq(seq)
        if branch_head(conn, user.tenant_id, conversation_id) is None:
            raise HTTPException(404, f"no conversation {shown(conversation_id)}")
        event = event_at_seq(conn, conversation_id, at)
        if event is None:
            raise HTTPException(400, f"conversation {shown(conversation_id)} has no event #{at}")
    except HTTPException as exc:
        return error_page(user, exc)
    return render(
        "fork.html",
        **page_context(user, conn, "", f"Fork or branch {conversation_id} at #{at}"),
        conversation_id=conversation_id,
        events=[event],
        seq=at,
        switch=event.get("kind") == "active_leaf_changed",
    )


@router.post("/console/conversations/{conversation_id}/fork", summary="console: fork")
async def fork(request: Request, conversation_id: str) -> Response:
    """A new conversation continuing after the event (its id given, or a UUID)."""
    user, fields, refused = await _checked(request)
    if refused or user is None:
        return refused or login_redirect()
    new_id = fields.get("new_conversation_id", "").strip()
    try:
        at = _seq(fields.get("at_seq"))
        if conversation_id_problem(conversation_id):
            raise HTTPException(404, f"no conversation {shown(conversation_id)}")
        problem = conversation_id_problem(new_id) if new_id else None
        if problem:
            raise HTTPException(400, f"the new conversation's id {problem}")
        if new_id == conversation_id:
            raise HTTPException(409, f"conversation {shown(new_id)} already exists: a fork needs a new id")
        ctx = context(request)
        await run_in_threadpool(check_seq, ctx, user.tenant_id, conversation_id, at)
        accepted = await send_to_inbox(
            ctx, user.tenant_id, new_id or str(uuid.uuid4()), "fork", "", user.name or "user",
            must_be_new=True, fresh=not new_id, at_seq=at, source_conversation_id=conversation_id,
        )  # fmt: skip
    except HTTPException as exc:
        return error_page(user, exc)
    except PublishError as exc:
        return error_page(user, _unavailable(exc))
    query = urlencode({"notice": "forked", "fork": accepted.conversation_id})
    return redirect(f"/console/conversations/{quote(conversation_id, safe='')}?{query}")


@router.post("/console/conversations/{conversation_id}/branch", summary="console: branch")
async def branch(request: Request, conversation_id: str) -> Response:
    """Make the event the active leaf: the next message starts a new branch there."""
    user, fields, refused = await _checked(request)
    if refused or user is None:
        return refused or login_redirect()
    try:
        at = _seq(fields.get("at_seq"))
        if conversation_id_problem(conversation_id):
            raise HTTPException(404, f"no conversation {shown(conversation_id)}")
        ctx = context(request)
        await run_in_threadpool(check_seq, ctx, user.tenant_id, conversation_id, at)
        sender = user.name or "user"
        await send_to_inbox(
            ctx, user.tenant_id, conversation_id, "branch", "", sender, must_exist=True, at_seq=at
        )
    except HTTPException as exc:
        return error_page(user, exc)
    except PublishError as exc:
        return error_page(user, _unavailable(exc))
    return redirect(f"/console/conversations/{quote(conversation_id, safe='')}?notice=branched")
