"""The task tree projection equals the tree recomputed from the raw log, for generated delegation
histories (conversations linked to parents by their system prompts, interleaved in one log)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from convdb.projections import stats, tree
from convdb.schemas.events import Event, LLMUsageEvent, MessageEvent, StateUpdateEvent, SystemPromptEvent

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STATUSES = ("running", "finished", "error", "stuck", "waiting_for_human")


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[str], list[Event]]:
    """Conversation ids (index 0 a root) and one interleaved log of all their events."""
    count = draw(st.integers(1, 10))
    ids = [f"c{i}" for i in range(count)]
    parents = [None] + [draw(st.integers(0, i - 1)) for i in range(1, count)]
    depth = [0] * count
    for i in range(1, count):
        depth[i] = depth[parents[i]] + 1  # type: ignore[index]
    per: list[list[Event]] = []
    for i, cid in enumerate(ids):
        parent = parents[i]
        common: dict[str, Any] = {"conversation_id": cid, "tenant_id": "t", "source": "agent"}
        events: list[Event] = [
            SystemPromptEvent(
                id=str(uuid.uuid4()), seq=1, timestamp=T0, content="p", **common,
                parent_conversation_id=None if parent is None else ids[parent],
                parent_operation_id=None if parent is None else f"{ids[parent]}/a/child-{i}",
                delegation_depth=depth[i],
            )
        ]  # fmt: skip
        for seq in range(2, draw(st.integers(2, 8))):
            kind = draw(st.sampled_from(("usage", "status", "message")))
            at = T0 + timedelta(seconds=seq)
            fields = {
                "id": str(uuid.uuid4()),
                "seq": seq,
                "timestamp": at,
                "parent_id": events[-1].id,
                **common,
            }
            if kind == "usage":
                events.append(
                    LLMUsageEvent(
                        **fields, model="m", llm_response_id="r", prompt_tokens=draw(st.integers(0, 500)),
                        completion_tokens=draw(st.integers(0, 500)), latency_ms=1.0,
                        cost=draw(st.integers(0, 64)) / 1024,  # exact in binary: sums in any order agree
                    )
                )  # fmt: skip
            elif kind == "status":
                events.append(StateUpdateEvent(**fields, execution_status=draw(st.sampled_from(STATUSES))))
            else:
                events.append(MessageEvent(**fields, role="assistant", content="x"))
        per.append(events)
    log: list[Event] = []
    cursors = [0] * count
    while any(c < len(per[i]) for i, c in enumerate(cursors)):
        i = draw(st.sampled_from([i for i, c in enumerate(cursors) if c < len(per[i])]))
        log.append(per[i][cursors[i]])
        cursors[i] += 1
    return ids, log


def projected(log: list[Event], batch: int) -> dict[str, tree.Node]:
    """The nodes as the read side keeps them: the stats fold, fed in batches, per conversation."""
    states: dict[str, stats.ConversationStats] = {}
    for start in range(0, len(log), batch):
        chunk = log[start : start + batch]
        for cid in dict.fromkeys(e.conversation_id for e in chunk):
            state = states.get(cid, stats.initial(cid))
            states[cid] = stats.fold_all(state, [e for e in chunk if e.conversation_id == cid])
    return {cid: tree.node_of(s) for cid, s in states.items()}


def recomputed(log: list[Event], cid: str) -> dict[str, Any]:
    """The tree below `cid` straight from the raw log (no projection code)."""
    mine = [e for e in log if e.conversation_id == cid]
    prompt = next(e for e in mine if isinstance(e, SystemPromptEvent))
    usage = [e for e in mine if isinstance(e, LLMUsageEvent)]
    statuses = [e.execution_status for e in mine if isinstance(e, StateUpdateEvent)]
    kids = sorted(
        {
            e.conversation_id
            for e in log
            if isinstance(e, SystemPromptEvent) and e.parent_conversation_id == cid
        }
    )
    children = [recomputed(log, k) for k in kids]
    tokens = sum(u.prompt_tokens + u.completion_tokens for u in usage)
    cost = sum(u.cost or 0.0 for u in usage)
    return {
        "conversation_id": cid,
        "parent_conversation_id": prompt.parent_conversation_id,
        "parent_operation_id": prompt.parent_operation_id,
        "depth": prompt.delegation_depth,
        "execution_status": statuses[-1] if statuses else None,
        "tokens": tokens,
        "cost": cost,
        "total": {
            "conversations": 1 + sum(c["total"]["conversations"] for c in children),
            "tokens": tokens + sum(c["total"]["tokens"] for c in children),
            "cost": cost + sum(c["total"]["cost"] for c in children),
        },
        "children": children,
    }


@settings(max_examples=150, deadline=None)
@given(histories(), st.integers(1, 7), st.data())
def test_the_tree_projection_equals_the_tree_recomputed_from_the_raw_log(
    history: tuple[list[str], list[Event]], batch: int, data: st.DataObject
) -> None:
    ids, log = history
    nodes = projected(log, batch)
    assert tree.build(nodes, ids[0]).as_dict() == recomputed(log, ids[0])
    some = data.draw(st.sampled_from(ids))
    assert tree.root_of(nodes, some) == ids[0]
    assert tree.build(nodes, some).as_dict() == recomputed(log, some)


def test_a_log_that_links_in_a_loop_is_cut_not_followed_forever() -> None:
    def node(cid: str, parent: str) -> tree.Node:
        return tree.Node(cid, parent, f"{parent}/a/child-0", 1, "finished", 1, 1, 0.5)

    nodes = {"a": node("a", "b"), "b": node("b", "a")}
    assert tree.root_of(nodes, "a") in ("a", "b")
    built = tree.build(nodes, "a")
    assert built.conversations == 2 and built.tokens == 4
