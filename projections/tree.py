"""The task tree of delegating conversations: parent, children, states, rolled-up tokens and cost.

Pure: it reads what the stats projection keeps per conversation (its parent link, status, usage),
so the tree is rebuilt from the log like every read model. A conversation's totals are its own
figures plus those of every conversation below it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from convdb.projections.stats import ConversationStats

MAX_DEPTH = 64
"""How far up a root is looked for (a log that links in a loop is cut there, never followed forever)."""


@dataclass(frozen=True)
class Node:
    """One conversation's place and figures in its tree."""

    conversation_id: str
    parent_conversation_id: str | None
    parent_operation_id: str | None
    depth: int
    status: str | None
    prompt_tokens: int
    completion_tokens: int
    cost: float


@dataclass(frozen=True)
class Tree:
    """A conversation, its subtree, and the subtree's totals (the conversation's included)."""

    node: Node
    children: tuple[Tree, ...]
    conversations: int
    tokens: int
    cost: float

    def as_dict(self) -> dict[str, object]:
        """The tree as JSON-able data (children nested)."""
        n = self.node
        return {
            "conversation_id": n.conversation_id,
            "parent_conversation_id": n.parent_conversation_id,
            "parent_operation_id": n.parent_operation_id,
            "depth": n.depth,
            "execution_status": n.status,
            "tokens": n.prompt_tokens + n.completion_tokens,
            "cost": n.cost,
            "total": {"conversations": self.conversations, "tokens": self.tokens, "cost": self.cost},
            "children": [c.as_dict() for c in self.children],
        }


def node_of(stats: ConversationStats) -> Node:
    """A conversation's node, from its statistics."""
    parent = stats.parent
    return Node(
        stats.conversation_id,
        parent.conversation_id if parent else None,
        parent.operation_id if parent else None,
        parent.depth if parent else 0,
        stats.shown_status,
        stats.usage.prompt_tokens,
        stats.usage.completion_tokens,
        stats.usage.cost,
    )


def children_of(nodes: Mapping[str, Node]) -> dict[str, list[str]]:
    """parent id -> its children's ids, sorted."""
    out: dict[str, list[str]] = {}
    for node in nodes.values():
        if node.parent_conversation_id is not None:
            out.setdefault(node.parent_conversation_id, []).append(node.conversation_id)
    return {parent: sorted(kids) for parent, kids in out.items()}


def root_of(nodes: Mapping[str, Node], conversation_id: str) -> str:
    """The root of a conversation's tree: up its parents while they are known (at most `MAX_DEPTH`)."""
    current = conversation_id
    seen = {current}
    for _ in range(MAX_DEPTH):
        node = nodes.get(current)
        parent = node.parent_conversation_id if node else None
        if parent is None or parent not in nodes or parent in seen:
            return current
        seen.add(parent)
        current = parent
    return current


def build(nodes: Mapping[str, Node], conversation_id: str) -> Tree:
    """The tree below a conversation (it must be in `nodes`) with totals rolled up."""
    return _build(nodes, children_of(nodes), conversation_id, frozenset())


def _build(nodes: Mapping[str, Node], kids: Mapping[str, list[str]], cid: str, above: frozenset[str]) -> Tree:
    node = nodes[cid]
    below = above | {cid}
    children = tuple(_build(nodes, kids, k, below) for k in kids.get(cid, ()) if k not in below)
    return Tree(
        node,
        children,
        1 + sum(c.conversations for c in children),
        node.prompt_tokens + node.completion_tokens + sum(c.tokens for c in children),
        node.cost + sum(c.cost for c in children),
    )
