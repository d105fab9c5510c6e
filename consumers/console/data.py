"""What each console page shows, read with the query API's own functions (same tenant scoping).

Nothing here writes SQL of its own: conversations, views, search, operations and their ledger
come from `consumers.api.*` and the `convdb.consumers.views.queries` / `convdb.consumers.effects` /
`convdb.consumers.index` query functions, so the console and the JSON API can never disagree about
what a tenant may see.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fastapi import HTTPException
from sqlalchemy.engine import Connection

from convdb.consumers.api.conversations import conversation_page, get_conversation, get_view, summaries
from convdb.consumers.api.tree import load_tree, parent_chain
from convdb.consumers.console.chart import Chart, usage_chart
from convdb.consumers.effects import (
    conversation_status,
    counts_by_conversation,
    list_operations,
    operation_ledger,
    operation_view,
)
from convdb.consumers.index import search
from convdb.consumers.views.queries import branch_events, branch_head
from convdb.projections import tree
from convdb.projections.index import SearchQuery

TIMELINE_PAGE = 200
"""Timeline items rendered per page: a 10k-event conversation shows its last 200, then pages back."""
MAX_USAGE_PAGES = 10
"""Pages of 500 `llm_usage` events read for the chart (the newest beyond that are not drawn)."""
OPERATIONS_SHOWN = 50
"""Operations listed on the conversation page, open ones first (the JSON API pages through all)."""
OPEN_FIRST = ("unknown", "executing", "proposed", "failed", "confirmed")


@dataclass
class Timeline:
    """A window of a conversation's active branch, oldest first."""

    events: list[dict[str, Any]]
    start: int
    total: int
    live: bool
    as_of: dict[str, Any] | None = None

    @property
    def tail_id(self) -> str | None:
        """Id of the newest event shown (where live updates continue from)."""
        return self.events[-1]["id"] if self.events else None

    @property
    def end(self) -> int:
        """Branch index after the last event shown."""
        return self.start + len(self.events)


def conversations(conn: Connection, tenant_id: str, **filters: Any) -> dict[str, Any]:
    """A page of the tenant's conversations (newest activity first) with effects by status."""
    page = conversation_page(conn, tenant_id, order="recent", **filters)
    ids = [c["conversation_id"] for c in page["conversations"]]
    effects = counts_by_conversation(conn, tenant_id, ids)
    for item in page["conversations"]:
        item["effects"] = {k: v for k, v in effects[item["conversation_id"]].items() if v}
    return page


def titles(conn: Connection, tenant_id: str, conversation_ids: set[str]) -> dict[str, str | None]:
    """The titles of some of the tenant's conversations (None: not titled yet)."""
    return {conv: s["title"] for conv, s in summaries(conn, tenant_id, conversation_ids).items()}


def window(total: int, before: int | None) -> tuple[int, int]:
    stop = total if before is None else max(0, min(before, total))
    return max(0, stop - TIMELINE_PAGE), stop


def live_timeline(conn: Connection, tenant_id: str, conversation_id: str, before: int | None) -> Timeline:
    """The active branch now, a window of it; HTTPException 404 unless the tenant's."""
    head = branch_head(conn, tenant_id, conversation_id)
    if head is None:
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    start, stop = window(head.branch_length, before)
    events = branch_events(conn, conversation_id, head.segments, start, stop)
    return Timeline(events, start, head.branch_length, live=stop == head.branch_length)


def as_of_timeline(
    conn: Connection,
    tenant_id: str,
    conversation_id: str,
    at: datetime | None,
    offset: int | None,
    before: int | None,
) -> Timeline:
    """The active branch as it was at a time or offset (the audit view), a window of it."""
    body = get_view(conversation_id, tenant_id, conn, at=at, offset=offset)
    events = body["events"]
    start, stop = window(len(events), before)
    return Timeline(events[start:stop], start, len(events), live=False, as_of=body["as_of"])


@dataclass
class ConversationPage:
    """Everything the conversation page shows besides the timeline."""

    summary: dict[str, Any]
    status: dict[str, Any] | None
    operations: list[dict[str, Any]] = field(default_factory=list)
    forks: list[dict[str, Any]] = field(default_factory=list)
    tree: dict[str, Any] | None = None
    """Its task tree when it delegated or was delegated to: parent, children, totals (else None)."""

    @property
    def operations_total(self) -> int:
        """Operations of the conversation in all (some may not be listed)."""
        return sum((self.status or {}).get("effects", {}).values())


def conversation(conn: Connection, tenant_id: str, conversation_id: str) -> ConversationPage:
    """Summary, the three facts, effect ledger and forks; HTTPException 404 unless the tenant's.

    Every part costs the same for 1k or 10k events: nothing here reads the whole log (the
    usage chart is a separate request, `usage_series`).
    """
    summary = get_conversation(conversation_id, tenant_id, conn)
    status = conversation_status(conn, conversation_id)
    if status is not None and status["tenant_id"] != tenant_id:
        status = None
    states: list[Any] = []
    for wanted in OPEN_FIRST:
        if len(states) < OPERATIONS_SHOWN and (status or {}).get("effects", {}).get(wanted):
            states += list_operations(
                conn, tenant_id, wanted, None, OPERATIONS_SHOWN - len(states), conversation_id
            )
    operations = [{**operation_view(s), "ledger": operation_ledger(conn, s.operation_id)} for s in states]
    forks = _forks_of(conn, tenant_id, conversation_id)
    return ConversationPage(summary, status, operations, forks, task_tree(conn, tenant_id, conversation_id))


def task_tree(conn: Connection, tenant_id: str, conversation_id: str) -> dict[str, Any] | None:
    """The conversation's place in its task tree (parent, children with their states, the totals of
    its subtree and of the whole tree); None when it neither delegated nor was delegated to."""
    try:
        nodes, root = load_tree(conn, tenant_id, conversation_id)
    except HTTPException:
        return None  # the stats consumer has not stored it yet
    mine = tree.build(nodes, conversation_id)
    if mine.node.parent_conversation_id is None and not mine.children:
        return None
    whole = tree.build(nodes, root)
    return {
        "parent": mine.node.parent_conversation_id,
        "root": root,
        "children": [c.as_dict() for c in mine.children],
        "total": mine.as_dict()["total"],
        "whole": whole.as_dict()["total"],
    }


def usage_series(conn: Connection, tenant_id: str, conversation_id: str) -> Chart | None:
    """The usage chart: every `llm_usage` event of the conversation (up to 5,000), cumulated."""
    return usage_chart(_usages(conn, tenant_id, conversation_id))


def _usages(conn: Connection, tenant_id: str, conversation_id: str) -> list[dict[str, Any]]:
    usages: list[dict[str, Any]] = []
    cursor = None
    for _ in range(MAX_USAGE_PAGES):
        query = SearchQuery(
            tenant_id=tenant_id,
            conversation_id=conversation_id,
            kinds=("llm_usage",),
            limit=500,
            cursor=cursor,
        )
        page = search(conn, query)
        usages.extend(json.loads(row["payload"]) for row in page.rows)
        cursor = page.cursor
        if cursor is None:
            break
    return usages


def _forks_of(conn: Connection, tenant_id: str, conversation_id: str) -> list[dict[str, Any]]:
    """Conversations forked from this one (their `ForkEvent`s name it as the source)."""
    page = search(conn, SearchQuery(tenant_id=tenant_id, kinds=("fork",), limit=500))
    forks = [json.loads(row["payload"]) for row in page.rows]
    return [f for f in forks if f.get("source_conversation_id") == conversation_id]


def queue(conn: Connection, tenant_id: str, after: str | None, limit: int = 50) -> dict[str, Any]:
    """The tenant's unknown operations (the human queue), each with its evidence and ledger."""
    states = list_operations(conn, tenant_id, "unknown", after, limit)
    items = [
        {
            **operation_view(s),
            "ledger": operation_ledger(conn, s.operation_id),
            "chain": parent_chain(conn, tenant_id, s.conversation_id),
        }
        for s in states
    ]
    return {"operations": items, "next": states[-1].operation_id if len(states) == limit else None}
