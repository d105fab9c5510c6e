"""The branch tree of one conversation: every leaf, how far it shares the active branch, its events."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException
from sqlalchemy.engine import Connection

from convdb.consumers.views.queries import branch_head, load_state
from convdb.projections import view
from convdb.projections._text import shorten
from convdb.projections.errors import ProjectionError

SHOWN = 200
LABEL = 90
"""Characters of a leaf's label (its branch's last message)."""


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
    label: str = ""
    """The branch's last message (role: text), or its last event's kind when it has none."""


@dataclass
class Node:
    """A run of events the same branches share, then where they part (`children`)."""

    first_seq: int
    last_seq: int
    count: int
    children: list[Node]
    leaf: Branch | None = None
    """The branch that ends here (None: the run goes on into its children)."""


def tree(paths: Sequence[tuple[Branch, Sequence[Any]]]) -> list[Node]:
    """The branches' paths from the root as a tree of shared runs (a trie with single-child chains
    merged): each node is where some branches still go together, its children where they part."""
    root: dict[str, Any] = {}
    for branch, path in paths:
        level = root
        for i, event in enumerate(path):
            entry = level.setdefault(event.id, {"event": event, "next": {}, "leaf": None})
            if i == len(path) - 1:
                entry["leaf"] = branch
            level = entry["next"]

    def build(level: dict[str, Any]) -> list[Node]:
        nodes = []
        for entry in level.values():
            first, count = entry["event"], 1
            while len(entry["next"]) == 1 and entry["leaf"] is None:
                entry = next(iter(entry["next"].values()))
                count += 1
            nodes.append(Node(first.seq, entry["event"].seq, count, build(entry["next"]), entry["leaf"]))
        return nodes

    return build(root)


def _label(path: Sequence[Any]) -> str:
    message = next((e for e in reversed(path) if e.kind == "message"), None)
    if message is None:
        return f"(no message; last event: {path[-1].kind})" if path else ""
    return shorten(f"{message.role}: {message.content}", LABEL)


def branch_tree(
    conn: Connection, tenant_id: str, conversation_id: str, leaf: str | None
) -> tuple[list[Branch], list[dict[str, Any]], list[Node]]:
    """Every branch (active first), when `leaf` is given that branch's last events, and the tree.

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
    paths: list[tuple[Branch, Sequence[Any]]] = []
    for node in nodes:
        # The active leaf is a leaf even with children: a branch switched back to it (the next
        # event starts a new branch there).
        if node.id in parents and node.id != state.active_leaf:
            continue
        path = view.path_to_root(state, node.id)
        shared = 0
        while shared < min(len(path), len(active_ids)) and path[shared].id == active_ids[shared]:
            shared += 1
        branch = Branch(
            node.id,
            node.kind,
            node.timestamp.isoformat(),
            len(path),
            shared,
            node.id == state.active_leaf,
            _label(path),
        )
        branches.append(branch)
        paths.append((branch, path))
    branches.sort(key=lambda b: (not b.active, b.timestamp))
    if leaf is None:
        return branches, [], tree(paths)
    if leaf not in state.events:
        raise HTTPException(404, f"no event {leaf!r} in conversation {conversation_id!r}")
    try:
        path = view.path_to_root(state, leaf)
    except ProjectionError as exc:
        raise HTTPException(404, f"event {leaf!r} is not on a branch: {exc}") from exc
    return branches, [e.model_dump(mode="json") for e in path[-SHOWN:]], tree(paths)
