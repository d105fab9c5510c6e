"""The branch tree of one conversation: every leaf, how far it shares the active branch, its events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException
from sqlalchemy.engine import Connection

from convdb.consumers.views.queries import branch_head, load_state
from convdb.projections import view
from convdb.projections.errors import ProjectionError

SHOWN = 200


@dataclass(frozen=True)
class Branch:
    """One leaf of the event tree and its path from the root."""

    leaf_id: str
    kind: str
    timestamp: str
    length: int
    shared: int
    """Events it shares with the active branch (from the root)."""
    active: bool


def branch_tree(
    conn: Connection, tenant_id: str, conversation_id: str, leaf: str | None
) -> tuple[list[Branch], list[dict[str, Any]]]:
    """Every branch (active first) and, when `leaf` is given, that branch's last events.

    Raises:
        HTTPException: 404 unless the tenant has the conversation (or the leaf is not in it).
    """
    if branch_head(conn, tenant_id, conversation_id) is None:
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    # Folding the whole log is O(N): this page is opened on purpose, never on the main page.
    state = load_state(conn, conversation_id)
    nodes = [e for e in state.log if e.seq != 0 and e.kind != "active_leaf_changed"]
    parents = {e.parent_id for e in nodes if e.parent_id}
    active_ids = [e.id for e in state.path]
    branches = []
    for node in nodes:
        if node.id in parents:
            continue
        path = view.path_to_root(state, node.id)
        shared = 0
        while shared < min(len(path), len(active_ids)) and path[shared].id == active_ids[shared]:
            shared += 1
        branches.append(
            Branch(
                node.id,
                node.kind,
                node.timestamp.isoformat(),
                len(path),
                shared,
                node.id == state.active_leaf,
            )
        )
    branches.sort(key=lambda b: (not b.active, b.timestamp))
    if leaf is None:
        return branches, []
    if leaf not in state.events:
        raise HTTPException(404, f"no event {leaf!r} in conversation {conversation_id!r}")
    try:
        path = view.path_to_root(state, leaf)
    except ProjectionError as exc:
        raise HTTPException(404, f"event {leaf!r} is not on a branch: {exc}") from exc
    return branches, [e.model_dump(mode="json") for e in path[-SHOWN:]]
