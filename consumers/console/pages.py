"""Console pages (GET): conversations, one conversation, its branches, the human queue, sign-in."""

from __future__ import annotations

from importlib import resources
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import Response

from convdb.consumers._rows import from_micros
from convdb.consumers.api.deps import Conn
from convdb.consumers.console import asof, crash, data
from convdb.consumers.console.branches import branch_tree
from convdb.consumers.console.live import conversation_version, list_version
from convdb.consumers.console.render import SECURITY_HEADERS, fragment, render
from convdb.consumers.console.web import (
    STATUSES,
    current_user,
    error_page,
    local_input,
    login_redirect,
    page_context,
    parse_int,
    parse_time,
)
from convdb.consumers.errors import QueryInputError
from convdb.consumers.index import search
from convdb.consumers.views.queries import branch_head
from convdb.projections.errors import QueryError
from convdb.projections.index import SearchQuery, Snippet
from convdb.schemas.validation import conversation_id_problem

router = APIRouter(include_in_schema=False)

Text = Annotated[str | None, Query(max_length=400)]
STATIC = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"}
NOTICES = {
    "sent": "Message sent: it is durable in the conversation's inbox and the runner will pick it up.",
    "pause": "Pause requested: the runner pauses the conversation after the current step.",
    "resume": "Resume requested.",
    "cancel": "Cancel requested: the runner ends the run (error, cancelled) and cancels its sub-agents.",
    "forked": "Fork requested: the new conversation's runner writes it; it is listed under “Forked into” "
    "once it is:",
    "branched": "Branch requested: the runner moves the active branch back; the next message starts a new "
    "branch.",
}
RESUMABLE = frozenset({"paused", "waiting_for_confirmation", "stuck"})
PAUSABLE = frozenset({"running", "idle", "waiting_for_children"})
CANCELLABLE = frozenset(
    {"running", "paused", "waiting_for_confirmation", "waiting_for_human", "waiting_for_children"}
)
"""Statuses a cancel ends (`convdb.producers.status.CANCELLABLE`, and a parent waiting for children)."""


@router.get("/", summary="console: conversations")
def conversations_page(
    request: Request,
    conn: Conn,
    status: Text = None,
    since: Text = None,
    until: Text = None,
    after: Text = None,
) -> Response:
    """The tenant's conversations, most recent activity first, filtered by status and time."""
    user = current_user(request)
    if user is None:
        return login_redirect()
    try:
        if status and status not in STATUSES:
            raise HTTPException(400, f"unknown status {status!r}")
        start, end = parse_time(since, "since"), parse_time(until, "until")
        page = data.conversations(
            conn, user.tenant_id, after=after or None, status=status or None, since=start, until=end
        )
    except QueryInputError as exc:
        return error_page(user, HTTPException(400, str(exc)))
    except HTTPException as exc:
        return error_page(user, exc)
    filters = {"status": status or "", "since": local_input(start), "until": local_input(end)}
    kept = {k: v for k, v in (("status", status), ("since", since), ("until", until)) if v}
    return render(
        "list.html",
        **page_context(user, conn, "list", "Conversations"),
        page=page,
        statuses=STATUSES,
        filters=filters,
        after=after,
        live_url="/console/live/conversations?v=" + list_version(conn, user.tenant_id),
        first_url="/?" + urlencode(kept),
        next_url="/?" + urlencode({**kept, "after": page["next_after"] or ""}),
    )


@router.get("/console/conversations/{conversation_id}", summary="console: one conversation")
def conversation_page(
    request: Request,
    conversation_id: str,
    conn: Conn,
    before: Text = None,
    at: Text = None,
    offset: Text = None,
    seq: Text = None,
    notice: Text = None,
    fork: Text = None,
) -> Response:
    """Timeline, the three facts, stats and chart, the effect ledger: live, or every panel as of a
    time, an events offset or an event (`seq`)."""
    user = current_user(request)
    if user is None:
        return login_redirect()
    then: asof.AsOf | None = None
    try:
        when, upto, until = parse_time(at, "at"), parse_int(offset, "offset"), parse_int(before, "before")
        at_seq = parse_int(seq, "seq")
        page = data.conversation(conn, user.tenant_id, conversation_id)
        if when is None and upto is None and at_seq is None:
            timeline = data.live_timeline(conn, user.tenant_id, conversation_id, until)
        else:
            moment = asof.Moment(when, upto, at_seq)
            if at_seq is not None:
                written = asof.seq_time(conn, conversation_id, at_seq)
                if written is None:
                    raise HTTPException(400, f"conversation {conversation_id!r} has no event #{at_seq} yet")
                moment.at = written if when is None else min(when, written)
            then = asof.as_of(conn, conversation_id, page.summary, page.operations, moment)
            start, stop = data.window(len(then.events), until)
            shown = {"at": moment.at.isoformat() if moment.at else None, "offset": upto, "seq": at_seq}
            timeline = data.Timeline(
                then.events[start:stop], start, len(then.events), live=False, as_of=shown
            )
            page = data.ConversationPage(then.summary, then.status, then.operations, page.forks)
    except HTTPException as exc:
        return error_page(user, exc)
    return render(
        "conversation.html",
        **page_context(
            user,
            conn,
            "",
            page.summary["title"] or conversation_id,
            **_timeline_links(
                conversation_id, timeline, when, upto, _version(conn, user.tenant_id, conversation_id)
            ),
        ),
        page=page,
        timeline=timeline,
        events=timeline.events,
        notice=NOTICES.get(notice or ""),
        notice_fork=fork if notice == "forked" and fork and not conversation_id_problem(fork) else None,
        commands=_commands(page.summary["execution_status"]),
        branched=_branched(page.summary),
        markers=crash.place(crash.takeovers(page.operations), timeline.events),
        as_of_at=local_input(when if at_seq is None else None),
        as_of_offset="" if upto is None else upto,
        as_of_seq="" if at_seq is None else at_seq,
        live_panels=then is None,
        asof_base=f"/console/conversations/{_q(conversation_id)}",
    )


def _version(conn: Any, tenant_id: str, conversation_id: str) -> str:
    head = branch_head(conn, tenant_id, conversation_id)
    return "" if head is None else conversation_version(conn, conversation_id, head)


def _timeline_links(
    conversation_id: str, timeline: data.Timeline, at: Any, offset: int | None, version: str
) -> dict[str, str]:
    base = f"/console/conversations/{_q(conversation_id)}"
    moment = timeline.as_of or {}
    if moment.get("seq") is not None:
        at = None  # the seq names the moment (its time is derived from it again)
    keep = {
        k: v
        for k, v in (("at", at.isoformat() if at else None), ("offset", offset), ("seq", moment.get("seq")))
        if v is not None
    }
    links = {"earlier_url": f"{base}?{urlencode({**keep, 'before': timeline.start})}", "later_url": ""}
    if timeline.end < timeline.total:
        links["later_url"] = f"{base}?{urlencode({**keep, 'before': timeline.end + data.TIMELINE_PAGE})}"
    links["live_url"] = f"/console/live/conversations/{_q(conversation_id)}?" + urlencode(
        {"since": timeline.end, "tail": timeline.tail_id or "", "v": version}
    )
    return links


def _q(value: str) -> str:
    return quote(value, safe="")


def _commands(status: str | None) -> set[str]:
    allowed_in = (("pause", PAUSABLE), ("resume", RESUMABLE), ("cancel", CANCELLABLE))
    return {c for c, allowed in allowed_in if status in allowed}


def _branched(summary: dict[str, Any]) -> bool:
    counts = (summary.get("stats") or {}).get("counts") or {}
    if any(counts.get(k) for k in ("active_leaf_changed", "fork", "condensation")):
        return True
    return bool(summary["events"] - counts.get("title", 0) != summary["view_length"])


@router.get("/console/conversations/{conversation_id}/usage.svg", summary="console: usage chart")
def usage_chart(request: Request, conversation_id: str, conn: Conn) -> Response:
    """Cumulative tokens and cost over time as an SVG image (rendered here; a separate request
    because it reads every LLM call, which the page itself never does)."""
    user = current_user(request)
    if user is None or branch_head(conn, user.tenant_id, conversation_id) is None:
        return Response("not found", status_code=404, media_type="text/plain")
    svg = fragment("usage.svg", chart=data.usage_series(conn, user.tenant_id, conversation_id))
    # The URL carries the conversation's last seq, so a cached image is never stale.
    headers = {**SECURITY_HEADERS, "Cache-Control": "private, max-age=86400"}
    return Response(svg, media_type="image/svg+xml", headers=headers)


@router.get("/console/conversations/{conversation_id}/branches", summary="console: branches")
def branches_page(request: Request, conversation_id: str, conn: Conn, leaf: Text = None) -> Response:
    """Every branch of the conversation's event tree; with `leaf`, that branch's events."""
    user = current_user(request)
    if user is None:
        return login_redirect()
    try:
        branches, events, nodes = branch_tree(conn, user.tenant_id, conversation_id, leaf or None)
    except HTTPException as exc:
        return error_page(user, exc)
    return render(
        "branches.html",
        **page_context(user, conn, "", f"Branches of {conversation_id}"),
        conversation_id=conversation_id,
        branches=branches,
        nodes=nodes,
        events=events,
        shown=leaf if events else None,
    )


@router.get("/console/queue", summary="console: human queue")
def queue_page(
    request: Request, conn: Conn, after: Text = None, resolved: Text = None, decision: Text = None
) -> Response:
    """Unknown operations across the tenant's conversations, each with evidence and the three decisions."""
    user = current_user(request)
    if user is None:
        return login_redirect()
    notice, notice_conversation = None, None
    if resolved and decision in DECISION_TEXT:
        notice = f"Recorded “{DECISION_TEXT[decision]}” for {resolved}; the conversation was woken."
        notice_conversation = resolved.rpartition("/")[0] or None
    return render(
        "queue.html",
        **page_context(user, conn, "queue", "Human queue"),
        queue=data.queue(conn, user.tenant_id, after or None),
        live_url="/console/live/conversations?v=" + list_version(conn, user.tenant_id),
        notice=notice,
        notice_conversation=notice_conversation,
    )


@router.get("/console/search", summary="console: search")
def search_page(
    request: Request,
    conn: Conn,
    q: Text = None,
    conversation_id: Text = None,
    cursor: Text = None,
) -> Response:
    """Full-text search over the tenant's events (or one conversation's): hits with their snippets."""
    user = current_user(request)
    if user is None:
        return login_redirect()
    hits: list[dict[str, Any]] = []
    next_url, error = "", None
    if q:
        try:
            query = SearchQuery(
                tenant_id=user.tenant_id,
                q=q,
                conversation_id=conversation_id or None,
                cursor=cursor or None,
                limit=25,
            )
            page = search(conn, query)
        except QueryError as exc:
            error = str(exc)
        else:
            titles = data.titles(conn, user.tenant_id, {r["conversation_id"] for r in page.rows})
            hits = [
                {
                    **row,
                    "parts": _marked(row["snippet"]),
                    "title": titles.get(row["conversation_id"]),
                    "when": from_micros(row["timestamp_us"]),
                }
                for row in page.rows
            ]
            if page.cursor:
                kept = {"q": q, "conversation_id": conversation_id or "", "cursor": page.cursor}
                next_url = "/console/search?" + urlencode(kept)
    return render(
        "search.html",
        **page_context(user, conn, "search", f"Search: {q}" if q else "Search"),
        q=q or "",
        conversation_id=conversation_id or "",
        hits=hits,
        searched=bool(q) and error is None,
        error=error,
        later=bool(cursor),
        next_url=next_url,
    )


def _marked(snippet: Snippet) -> list[tuple[str, bool]]:
    """A snippet as (text, is a match) parts, for the template to escape and mark."""
    parts, at = [], 0
    for start, end in snippet.highlights:
        if start > at:
            parts.append((snippet.text[at:start], False))
        parts.append((snippet.text[start:end], True))
        at = end
    if at < len(snippet.text):
        parts.append((snippet.text[at:], False))
    return parts


DECISION_TEXT = {
    "confirmed": "it happened",
    "retry": "it did not happen (retry allowed)",
    "failed": "abandon",
}


@router.get("/console/static/{name}", summary="console: script and style")
def static(name: str) -> Response:
    """The console's own script and style sheet (package data; no CDN)."""
    if name not in STATIC:
        raise HTTPException(404, "no such file")
    body = resources.files("convdb.consumers.console").joinpath("static", name).read_bytes()
    headers = {**SECURITY_HEADERS, "Cache-Control": "public, max-age=300"}
    return Response(body, media_type=STATIC[name], headers=headers)
