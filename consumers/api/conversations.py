"""Conversations: the tenant's list (title, status, stats), one conversation, and its view (as of T)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Query
from sqlalchemy.engine import Connection

from consumers._rows import micros
from consumers.api.deps import Conn, Tenant
from consumers.stats import conversations as stats_table
from consumers.stats import from_row
from consumers.titles.projector import processors as titles_table
from consumers.views import load_state
from consumers.views.tables import conversations as views_table
from consumers.views.tables import events as views_events
from projections import stats, view

router = APIRouter(tags=["conversations"])


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


def _summary(row: Any) -> dict[str, Any]:
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
    }


def _stats_mapping(m: Any) -> dict[str, Any]:
    return {c.name: m[f"s_{c.name}"] for c in stats_table.c}


@router.get("/conversations", summary="List the tenant's conversations")
def list_conversations(
    tenant_id: Tenant,
    conn: Conn,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    after: Annotated[str | None, Query(description="Last conversation_id of the previous page.")] = None,
) -> dict[str, Any]:
    """Conversations with title, execution status and statistics, ordered by id (keyset pages)."""
    query = _summary_query(tenant_id)
    if after is not None:
        query = query.where(views_table.c.conversation_id > after)
    rows = conn.execute(query.order_by(views_table.c.conversation_id).limit(limit + 1)).all()
    items = [_summary(r) for r in rows[:limit]]
    return {"conversations": items, "next_after": items[-1]["conversation_id"] if len(rows) > limit else None}


@router.get("/conversations/{conversation_id}", summary="One conversation: title, status, stats")
def get_conversation(conversation_id: str, tenant_id: Tenant, conn: Conn) -> dict[str, Any]:
    """The conversation's summary; 404 when it does not exist for this tenant."""
    row = conn.execute(
        _summary_query(tenant_id).where(views_table.c.conversation_id == conversation_id)
    ).first()
    if row is None:
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    return _summary(row)


@router.get("/conversations/{conversation_id}/view", summary="The active branch (optionally as of T)")
def get_view(
    conversation_id: str,
    tenant_id: Tenant,
    conn: Conn,
    at: Annotated[datetime | None, Query(description="Only events up to this time (ISO-8601).")] = None,
    offset: Annotated[int | None, Query(ge=0, description="Only events up to this Kafka offset.")] = None,
) -> dict[str, Any]:
    """What the agent reads: the active branch, condensations applied, root first."""
    head = conn.execute(
        sa.select(views_table.c.branch, views_table.c.active_leaf, views_table.c.last_seq).where(
            views_table.c.conversation_id == conversation_id, views_table.c.tenant_id == tenant_id
        )
    ).first()
    if head is None:
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    if at is None and offset is None:
        events = _live_branch(conn, conversation_id, json.loads(head.branch))
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


def _live_branch(conn: Connection, conversation_id: str, segments: list[list[int]]) -> list[Any]:
    # Segments are in branch order, which is not position order: a condensation's summary
    # stands where the first event it forgot stood, before later (lower-position) events.
    if not segments:
        return []
    e = views_events.c
    ranges = sa.or_(*(e.position.between(first, last) for first, last in segments))
    query = sa.select(e.position, e.payload).where(e.conversation_id == conversation_id, ranges)
    payloads = dict(conn.execute(query).all())
    return [json.loads(payloads[p]) for first, last in segments for p in range(first, last + 1)]
