"""Task trees: a conversation's children and its root, with states and rolled-up tokens and cost.

The links are the stats projection's (each child's system prompt names its parent); the tree and its
totals are `convdb.projections.tree`, computed from the rows of one tenant's tree.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException
from sqlalchemy.engine import Connection

from convdb.consumers.api.deps import Conn, Tenant
from convdb.consumers.api.params import AUTHENTICATED, ConversationIdPath, problems
from convdb.consumers.stats import conversations as stats_table
from convdb.consumers.stats import from_row
from convdb.projections import tree

router = APIRouter(tags=["conversations"], responses=AUTHENTICATED)


def _nodes(conn: Connection, tenant_id: str, where: Any) -> dict[str, tree.Node]:
    rows = conn.execute(sa.select(stats_table).where(stats_table.c.tenant_id == tenant_id, where))
    return {row.conversation_id: tree.node_of(from_row(dict(row._mapping))) for row in rows}


def load_tree(conn: Connection, tenant_id: str, conversation_id: str) -> tuple[dict[str, tree.Node], str]:
    """The nodes of a conversation's whole tree (up to its root, then down from it) and the root's id.

    Raises:
        HTTPException: 404 when the tenant has no such conversation.
    """
    c = stats_table.c
    nodes = _nodes(conn, tenant_id, c.conversation_id == conversation_id)
    if conversation_id not in nodes:
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    current = nodes[conversation_id]
    for _ in range(tree.MAX_DEPTH):
        parent = current.parent_conversation_id
        if parent is None or parent in nodes:
            break
        found = _nodes(conn, tenant_id, c.conversation_id == parent)
        if parent not in found:
            break  # its parent is not (yet) in the store: the tree starts here as far as we know
        nodes.update(found)
        current = found[parent]
    root = tree.root_of(nodes, conversation_id)
    level, expanded = [root], {root}
    for _ in range(tree.MAX_DEPTH):
        below = _nodes(conn, tenant_id, c.parent_conversation_id.in_(level))
        nodes.update(below)
        level = [cid for cid in below if cid not in expanded]
        expanded.update(level)
        if not level:
            break
    return nodes, root


def parent_chain(conn: Connection, tenant_id: str, conversation_id: str) -> list[str]:
    """The conversations above one in its task tree, root first (empty for a root or an unknown one)."""
    chain: list[str] = []
    current = conversation_id
    for _ in range(tree.MAX_DEPTH):
        found = _nodes(conn, tenant_id, stats_table.c.conversation_id == current).get(current)
        parent = found.parent_conversation_id if found else None
        if parent is None or parent in chain or parent == conversation_id:
            break
        chain.append(parent)
        current = parent
    return chain[::-1]


@router.get(
    "/conversations/{conversation_id}/children",
    summary="The conversations it delegated to, with their states and rolled-up totals",
    responses=problems(404),
)
def get_children(conversation_id: ConversationIdPath, tenant_id: Tenant, conn: Conn) -> dict[str, Any]:
    """Each child with its status, own tokens and cost, and the totals of its own subtree; 404 when
    the conversation does not exist for this tenant."""
    nodes, _ = load_tree(conn, tenant_id, conversation_id)
    built = tree.build(nodes, conversation_id)
    return {
        "conversation_id": conversation_id,
        "parent_conversation_id": built.node.parent_conversation_id,
        "total": built.as_dict()["total"],
        "children": [{**child.as_dict(), "children": len(child.children)} for child in built.children],
    }


@router.get(
    "/conversations/{conversation_id}/root",
    summary="The root of its task tree, the path down to it, and the whole tree",
    responses=problems(404),
)
def get_root(conversation_id: ConversationIdPath, tenant_id: Tenant, conn: Conn) -> dict[str, Any]:
    """The root conversation, the path from it to this one, and the tree below the root (totals
    rolled up at every node); 404 when the conversation does not exist for this tenant."""
    nodes, root = load_tree(conn, tenant_id, conversation_id)
    path = [conversation_id]
    while path[-1] != root:
        parent = nodes[path[-1]].parent_conversation_id
        if parent is None or parent in path:
            break
        path.append(parent)
    return {"root": root, "path": path[::-1], "tree": tree.build(nodes, root).as_dict()}
