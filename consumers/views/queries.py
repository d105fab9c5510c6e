"""Reading the views tables: a conversation's head row, a window of its active branch, its full view
(as of a time or an offset) and its owner.

The API and the console read the views through these functions only, so the tables' layout (the
branch stored as runs of log positions, `segments`) is known to this package alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from convdb.consumers._rows import event_from_payload, payload_json
from convdb.consumers.store import stored_payload
from convdb.consumers.views import segments
from convdb.consumers.views.tables import conversations, events
from convdb.projections import view


class BranchHead(NamedTuple):
    """Where a conversation's view stands: its stored row, the branch decoded."""

    segments: segments.Segments
    """The active branch as runs of log positions."""
    active_leaf: str | None
    last_seq: int
    branch_length: int
    event_count: int
    """Events folded (the log's length)."""
    updated_us: int
    """Timestamp of the last event folded, µs since the epoch."""


def branch_head(conn: Connection, tenant_id: str, conversation_id: str) -> BranchHead | None:
    """The conversation's head; None unless the tenant has the conversation."""
    v = conversations.c
    query = sa.select(v.branch, v.active_leaf, v.last_seq, v.branch_length, v.event_count, v.updated_us)
    row = conn.execute(query.where(v.conversation_id == conversation_id, v.tenant_id == tenant_id)).first()
    if row is None:
        return None
    return BranchHead(segments.decode(row.branch), *row[1:])


def branch_events(
    conn: Connection, conversation_id: str, runs: segments.Segments, start: int = 0, stop: int | None = None
) -> list[Any]:
    """The active branch's events `start:stop` as JSON objects, in branch order (O(window) rows read).

    `runs` is the branch of the conversation's head (`BranchHead.segments`).
    """
    positions = segments.positions(runs, start, stop)
    if not positions:
        return []
    e = events.c
    ranges = sa.or_(*(e.position.between(first, last) for first, last in segments.runs_of(positions)))
    query = sa.select(e.position, stored_payload(events)).where(e.conversation_id == conversation_id, ranges)
    payloads: dict[int, bytes] = {position: payload for position, payload in conn.execute(query)}
    return [json.loads(payload_json(payloads[p])) for p in positions]


def load_state(connection: Connection, conversation_id: str, **bounds: int) -> view.ViewState:
    """Rebuild a conversation's view from its stored log, up to the bounds of `stored_events`."""
    return view.fold_all(view.initial(conversation_id), stored_events(connection, conversation_id, **bounds))


def stored_events(connection: Connection, conversation_id: str, **bounds: int) -> Iterator[Any]:
    """A conversation's stored log in fold order, up to `max_offset`, `max_timestamp_us` and/or
    `max_seq` (an annotation, seq 0, is kept by the seq bound: it belongs to no place in the chain)."""
    query = sa.select(stored_payload(events)).where(events.c.conversation_id == conversation_id)
    if "max_offset" in bounds:
        query = query.where(events.c.offset <= bounds["max_offset"])
    if "max_timestamp_us" in bounds:
        query = query.where(events.c.timestamp_us <= bounds["max_timestamp_us"])
    if "max_seq" in bounds:
        query = query.where(events.c.seq <= bounds["max_seq"])
    payloads = connection.execute(query.order_by(events.c.position)).scalars()
    return (event_from_payload(p) for p in payloads)


def event_at_seq(conn: Connection, conversation_id: str, seq: int) -> dict[str, Any] | None:
    """The conversation's event at `seq` as a JSON object (None when the views have none there).

    The last one folded there if several were (only a refused duplicate could be a second)."""
    e = events.c
    query = (
        sa.select(stored_payload(events))
        .where(e.conversation_id == conversation_id, e.seq == seq)
        .order_by(e.position.desc())
        .limit(1)
    )
    payload = conn.execute(query).scalar()
    found: dict[str, Any] | None = None if payload is None else json.loads(payload_json(payload))
    return found


def owner(conn: Connection, conversation_id: str) -> str | None:
    """The tenant the views name as the conversation's owner; None when they do not know it."""
    query = sa.select(conversations.c.tenant_id).where(conversations.c.conversation_id == conversation_id)
    found: str | None = conn.execute(query).scalar()
    return found


def agents(conn: Connection, conversation_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The agent each conversation runs, as its first event (a SystemPromptEvent) records it: name
    (None: written before agents were named, the runner's default), configuration version and tools.

    Conversations whose first event is no system prompt (forks, conversations run elsewhere) are
    left out. One primary-key read per conversation.
    """
    if not conversation_ids:
        return {}
    e = events.c
    query = sa.select(e.conversation_id, stored_payload(events)).where(
        e.conversation_id.in_(list(conversation_ids)), e.position == 0
    )
    found = {}
    for conversation_id, payload in conn.execute(query):
        first = json.loads(payload_json(payload))
        if first.get("kind") == "system_prompt":
            found[conversation_id] = {
                "name": first.get("agent"),
                "version": first.get("agent_version"),
                "tools": first.get("tools", []),
            }
    return found
