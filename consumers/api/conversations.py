"""Conversations: the tenant's list (title, status, stats), one conversation, and its view (as of T)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Any, Literal

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Query
from sqlalchemy.engine import Connection

from convdb.consumers._rows import micros
from convdb.consumers.api.deps import Conn, Tenant
from convdb.consumers.api.params import (
    AUTHENTICATED,
    MAX_INT64,
    ConversationIdPath,
    KeysetQuery,
    OffsetQuery,
    problems,
)
from convdb.consumers.errors import QueryInputError
from convdb.consumers.stats import conversations as stats_table
from convdb.consumers.stats import from_row
from convdb.consumers.titles.tables import processors as titles_table
from convdb.consumers.views.queries import agents, branch_events, branch_head, load_state
from convdb.consumers.views.tables import conversations as views_table
from convdb.projections import stats, view
from convdb.schemas.validation import shown

router = APIRouter(tags=["conversations"], responses=AUTHENTICATED)


def _summary_query(tenant_id: str) -> sa.Select[Any]:
    v, t, s = views_table.c, titles_table.c, stats_table
    return (
        sa.select(
            v.conversation_id,
            v.last_seq,
            v.event_count,
            v.branch_length,
            v.active_leaf,
            v.updated_us,
            t.title,
            t.origin,
            t.status.label("title_status"),
            *(c.label(f"s_{c.name}") for c in s.c),
        )
        .select_from(
            views_table.outerjoin(titles_table, t.conversation_id == v.conversation_id).outerjoin(
                s, s.c.conversation_id == v.conversation_id
            )
        )
        .where(v.tenant_id == tenant_id)
    )


def _summary(row: Any, agent: dict[str, Any] | None = None) -> dict[str, Any]:
    m = row._mapping
    stats_row = None if m["s_event_count"] is None else stats.as_row(from_row(_stats_mapping(m)))
    if stats_row is not None:
        stats_row.pop("conversation_id", None)
        stats_row.pop("tenant_id", None)
    return {
        "conversation_id": m["conversation_id"],
        "title": m["title"],
        "title_origin": m["origin"],
        "title_status": m["title_status"],
        "execution_status": None if stats_row is None else stats_row["execution_status"],
        "last_seq": m["last_seq"],
        "events": m["event_count"],
        "view_length": m["branch_length"],
        "active_leaf": m["active_leaf"],
        "stats": stats_row,
        "agent": agent,
    }


def _stats_mapping(m: Any) -> dict[str, Any]:
    return {c.name: m[f"s_{c.name}"] for c in stats_table.c}


Order = Literal["id", "recent"]
ExecutionStatus = Literal[
    "idle",
    "running",
    "paused",
    "waiting_for_confirmation",
    "waiting_for_human",
    "waiting_for_children",
    "finished",
    "error",
    "stuck",
]
"""The statuses a list is filtered by: the log's, and `waiting_for_children` (a running conversation
whose delegation call waits for its children, as the stats projection shows it)."""


@router.get("/conversations", summary="List the tenant's conversations")
def list_conversations(
    tenant_id: Tenant,
    conn: Conn,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    after: KeysetQuery = None,
    status: Annotated[ExecutionStatus | None, Query(description="Only this execution status.")] = None,
    since: Annotated[datetime | None, Query(description="Last activity at or after (ISO-8601).")] = None,
    until: Annotated[datetime | None, Query(description="Last activity before (ISO-8601).")] = None,
    order: Annotated[Order, Query(description="id, or recent: last activity first.")] = "id",
) -> dict[str, Any]:
    """Conversations with title, execution status and statistics, in keyset pages (by id or recency)."""
    return conversation_page(
        conn, tenant_id, limit=limit, after=after, status=status, since=since, until=until, order=order
    )


def conversation_page(
    conn: Connection,
    tenant_id: str,
    *,
    limit: int = 50,
    after: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    order: str = "id",
) -> dict[str, Any]:
    """One keyset page of the tenant's conversations; `after` is the previous page's `next_after`.

    Raises:
        QueryInputError: a time without timezone, or an `after` that is not of this order.
    """
    query = _summary_query(tenant_id)
    last_us = stats_table.c.last_us
    if status is not None:
        query = query.where(stats_table.c.execution_status == status)
    for bound, compare in ((since, last_us.__ge__), (until, last_us.__lt__)):
        if bound is not None:
            if bound.tzinfo is None:
                raise QueryInputError("`since`/`until` must carry a timezone (e.g. 2025-01-01T00:00:00Z)")
            query = query.where(compare(micros(bound)))
    if order == "recent":
        # Keyed on the stats table's (tenant, last_us, conversation) index: the newest first.
        query = query.where(stats_table.c.tenant_id == tenant_id)
        if after is not None:
            query = query.where(sa.tuple_(last_us, views_table.c.conversation_id) < _recent_key(after))
        query = query.order_by(last_us.desc(), views_table.c.conversation_id.desc())
    else:
        if after is not None:
            query = query.where(views_table.c.conversation_id > after)
        query = query.order_by(views_table.c.conversation_id)
    rows = conn.execute(query.limit(limit + 1)).all()
    ran_by = agents(conn, [r.conversation_id for r in rows[:limit]])
    items = [_summary(r, ran_by.get(r.conversation_id)) for r in rows[:limit]]
    more = len(rows) > limit
    if not more:
        return {"conversations": items, "next_after": None}
    last = rows[limit - 1]._mapping
    key = f"{last['s_last_us']}:{last['conversation_id']}" if order == "recent" else last["conversation_id"]
    return {"conversations": items, "next_after": key}


def _recent_key(after: str) -> tuple[int, str]:
    us, sep, conversation_id = after.partition(":")
    if not sep or not us.lstrip("-").isdigit() or len(us) > 20 or abs(int(us)) > MAX_INT64:
        raise QueryInputError(
            f"bad `after` {shown(after)} for order=recent: pass the previous page's next_after"
        )
    return int(us), conversation_id


@router.get(
    "/conversations/{conversation_id}",
    summary="One conversation: title, status, stats",
    responses=problems(404),
)
def get_conversation(conversation_id: ConversationIdPath, tenant_id: Tenant, conn: Conn) -> dict[str, Any]:
    """The conversation's summary (with `agent`: name, configuration version and tools, as its first
    event records them); 404 when it does not exist for this tenant."""
    row = conn.execute(
        _summary_query(tenant_id).where(views_table.c.conversation_id == conversation_id)
    ).first()
    if row is None:
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    return _summary(row, agents(conn, [conversation_id]).get(conversation_id))


def summaries(conn: Connection, tenant_id: str, conversation_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The summaries of some of the tenant's conversations, by id (those it does not have are left out)."""
    wanted = sorted(set(conversation_ids))
    if not wanted:
        return {}
    query = _summary_query(tenant_id).where(views_table.c.conversation_id.in_(wanted))
    return {row.conversation_id: _summary(row) for row in conn.execute(query)}


@router.get(
    "/conversations/{conversation_id}/view",
    summary="The active branch (optionally as of T)",
    responses=problems(404),
)
def get_view(
    conversation_id: ConversationIdPath,
    tenant_id: Tenant,
    conn: Conn,
    at: Annotated[datetime | None, Query(description="Only events up to this time (ISO-8601).")] = None,
    offset: OffsetQuery = None,
) -> dict[str, Any]:
    """What the agent reads: the active branch, condensations applied, root first."""
    head = branch_head(conn, tenant_id, conversation_id)
    if head is None:
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    if at is None and offset is None:
        events = branch_events(conn, conversation_id, head.segments)
        return {
            "conversation_id": conversation_id,
            "active_leaf": head.active_leaf,
            "last_seq": head.last_seq,
            "as_of": None,
            "events": events,
        }
    if at is not None and at.tzinfo is None:
        raise HTTPException(400, "`at` must carry a timezone (e.g. 2025-01-01T00:00:00Z)")
    bounds = {}
    if at is not None:
        bounds["max_timestamp_us"] = micros(at)
    if offset is not None:
        bounds["max_offset"] = offset
    state = load_state(conn, conversation_id, **bounds)
    return {
        "conversation_id": conversation_id,
        "active_leaf": state.active_leaf,
        "last_seq": state.last_seq,
        "as_of": {"at": at.isoformat() if at else None, "offset": offset},
        "events": [e.model_dump(mode="json") for e in view.active_branch(state)],
    }
