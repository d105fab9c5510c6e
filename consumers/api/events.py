"""Event search: filters + keyset cursor over the index (O(log N + page))."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query

from convdb.consumers.api.deps import Conn, Tenant
from convdb.consumers.api.params import AUTHENTICATED, ConversationIdQuery, KeysetQuery, LimitQuery
from convdb.consumers.index import search
from convdb.projections.index import MAX_Q, SearchQuery

router = APIRouter(tags=["events"], responses=AUTHENTICATED)


@router.get("/events", summary="Search the tenant's events")
def search_events(
    tenant_id: Tenant,
    conn: Conn,
    conversation_id: ConversationIdQuery = None,
    kind: Annotated[
        list[str] | None, Query(description="Event kind(s), e.g. action; repeatable.", max_length=32)
    ] = None,
    source: Annotated[
        list[str] | None, Query(description="Source(s): user, agent, environment, hook.", max_length=8)
    ] = None,
    since: Annotated[datetime | None, Query(description="At or after this time (ISO-8601).")] = None,
    until: Annotated[datetime | None, Query(description="Before this time (ISO-8601).")] = None,
    limit: LimitQuery = 50,
    cursor: KeysetQuery = None,
    q: Annotated[
        str | None,
        Query(
            description="Full-text: only events whose text (message, thought, tool arguments and "
            "result, error) holds every word; each hit then has a `snippet`.",
            max_length=MAX_Q,
        ),
    ] = None,
) -> dict[str, Any]:
    """Events in (timestamp, conversation, seq) order; pass `next_cursor` back for the next page.

    With `q`, each event has `snippet`: `text` around the first word found, and `highlights`, the
    (start, end) character offsets of the words in it (the text is plain: escape it to show it).
    A bad filter, cursor or an unknown query parameter answers 400 with a message naming it.
    """
    query = SearchQuery(
        tenant_id=tenant_id,
        conversation_id=conversation_id,
        kinds=tuple(kind or ()),
        sources=tuple(source or ()),
        since=since,
        until=until,
        limit=limit,
        cursor=cursor,
        q=q,
    )
    page = search(conn, query)
    return {"events": [_event(r) for r in page.rows], "next_cursor": page.cursor}


def _event(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "event_id": row["event_id"],
        "conversation_id": row["conversation_id"],
        "seq": row["seq"],
        "kind": row["kind"],
        "source": row["source"],
        "text": row["text"],
        "partition": row["partition"],
        "offset": row["offset"],
        "event": json.loads(row["payload"]),
        "snippet": None
        if row["snippet"] is None
        else {"text": row["snippet"].text, "highlights": [list(h) for h in row["snippet"].highlights]},
    }
