"""A LangGraph fork as a convdb branch: the pure placement (`graph_messages.place`, `graph.is_fork`).

A thread's root checkpoints are simulated (each with its parent and its messages, as
`add_messages` builds them): a turn extends the latest checkpoint, a fork copies an older one
(LangGraph's `__copy__`: same messages, the copied one's parent). Each checkpoint goes through
`place` as the hosted checkpointer does, and the events it says are folded into the view:

- the active branch always shows the latest checkpoint's messages, in order;
- every event id is written once (no message is projected twice, on any branch);
- every checkpoint's messages stay readable as the path to one event of the tree (an old
  lineage is a branch of the conversation);
- a fork with nothing new moves the leaf back; extending the latest never switches.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convdb.projections import view
from convdb.projections.graph_messages import Placement, event_ids, place, project_messages
from convdb.schemas import ActiveLeafChangedEvent, SystemPromptEvent
from convdb.schemas.events import Event

messages = pytest.importorskip("langchain_core.messages")

CID = "thread-1"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Checkpoint:
    """A root checkpoint of the simulated thread."""

    id: int
    parent: int | None
    messages: tuple[Any, ...]


class Thread:
    """The simulated graph thread and the conversation its checkpoints are projected into."""

    def __init__(self) -> None:
        self.checkpoints: list[Checkpoint] = []
        self.seq = 1
        prompt = SystemPromptEvent(
            id="prompt", conversation_id=CID, tenant_id="t", seq=1, timestamp=T0, source="agent",
            content="graph", tools=(), agent="g",
        )  # fmt: skip
        self.view = view.fold(view.initial(CID), prompt)
        self.placements: list[Placement] = []

    def put(
        self, parent: Checkpoint | None, new: tuple[Any, ...], *, copy_of: Checkpoint | None = None
    ) -> None:
        """A checkpoint after `parent` with its messages plus `new` (or a copy of `copy_of`)."""
        latest = self.checkpoints[-1] if self.checkpoints else None
        if copy_of is not None:
            record = Checkpoint(len(self.checkpoints), copy_of.parent, copy_of.messages)
        else:
            record = Checkpoint(
                len(self.checkpoints),
                parent.id if parent else None,
                (*(parent.messages if parent else ()), *new),
            )
        fork = latest is not None and record.parent != latest.id
        held = (
            event_ids(CID, self.checkpoints[record.parent].messages) if record.parent is not None else set()
        )
        placement = place(
            CID, record.messages, fork=fork, known=self.view.events, held=held,
            active_leaf=self.view.active_leaf, root="prompt",
        )  # fmt: skip
        self.placements.append(placement)
        self.checkpoints.append(record)
        self._write(placement)

    def _write(self, placement: Placement) -> None:
        leaf = self.view.active_leaf
        if placement.leaf is not None:
            self.seq += 1
            switch = ActiveLeafChangedEvent(
                id=f"switch-{self.seq}", conversation_id=CID, tenant_id="t", seq=self.seq, timestamp=T0,
                source="user", parent_id=leaf, leaf_event_id=placement.leaf,
            )  # fmt: skip
            self.view = view.fold(self.view, switch)
            leaf = placement.leaf
        for p in placement.events:
            self.seq += 1
            event = p.cls(
                conversation_id=CID, tenant_id="t", seq=self.seq, timestamp=T0, source=p.source,
                parent_id=leaf, **p.fields,
            )  # fmt: skip
            self.view = view.fold(self.view, event)
            leaf = event.id


def projected(msgs: tuple[Any, ...]) -> list[str]:
    return [p.id for p in project_messages(CID, msgs, (), {})]


def branch_ids(path: tuple[Event, ...] | list[Event]) -> list[str]:
    return [e.id for e in path if e.kind not in ("system_prompt", "active_leaf_changed")]


def turn(n: int, tools: bool) -> tuple[Any, ...]:
    """A user message and the answer (with a tool call and its result, and usage, when `tools`)."""
    asked = messages.HumanMessage(f"q{n}", id=f"u{n}")
    if not tools:
        return (asked, messages.AIMessage(f"a{n}", id=f"a{n}"))
    call = messages.AIMessage(
        "", id=f"c{n}", tool_calls=[{"name": "look", "args": {"n": n}, "id": f"call-{n}"}],
        usage_metadata={"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
    )  # fmt: skip
    return (
        asked,
        call,
        messages.ToolMessage("found", tool_call_id=f"call-{n}", id=f"t{n}"),
        messages.AIMessage(f"a{n}", id=f"a{n}"),
    )


# A step: ("turn", with tools?) extends the latest checkpoint; ("fork", k) copies checkpoint k
# (modulo the checkpoints there are) and, with ("fork+turn", k), answers a new turn on it.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), st.booleans()),
        st.tuples(st.sampled_from(["fork", "fork+turn"]), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=12,
)


def run(plan: list[tuple[str, Any]]) -> Thread:
    thread = Thread()
    for n, (kind, arg) in enumerate(plan):
        latest = thread.checkpoints[-1] if thread.checkpoints else None
        if kind == "turn" or latest is None:
            thread.put(latest, turn(n, bool(arg)))
            continue
        thread.put(None, (), copy_of=thread.checkpoints[arg % len(thread.checkpoints)])
        if kind == "fork+turn":
            thread.put(thread.checkpoints[-1], turn(n, False))
    return thread


@given(steps)
def test_the_active_branch_is_the_latest_lineage_and_old_lineages_stay_branches(
    plan: list[tuple[str, Any]],
) -> None:
    thread = run(plan)
    latest = thread.checkpoints[-1]
    assert branch_ids(view.active_branch(thread.view)) == projected(latest.messages)
    ids = [e.id for e in thread.view.log]
    assert len(ids) == len(set(ids))  # nothing projected twice
    for checkpoint in thread.checkpoints:
        wanted = projected(checkpoint.messages)
        if wanted:
            assert branch_ids(view.path_to_root(thread.view, wanted[-1])) == wanted


@given(steps)
def test_folding_a_thread_twice_gives_the_same_tree(plan: list[tuple[str, Any]]) -> None:
    first, second = run(plan), run(plan)
    assert [e.id for e in first.view.log] == [e.id for e in second.view.log]
    assert first.view.active_leaf == second.view.active_leaf


def test_a_fork_of_an_old_checkpoint_switches_back_and_a_turn_after_it_is_a_new_branch() -> None:
    thread = run([("turn", False), ("turn", True)])
    one = thread.checkpoints[0]
    thread.put(None, (), copy_of=one)
    assert thread.placements[-1] == Placement("a0", [], frozenset({"u0", "a0"}))  # back to the first answer
    thread.put(thread.checkpoints[-1], turn(7, False))
    assert thread.placements[-1].leaf is None  # extending the latest never switches
    assert branch_ids(view.active_branch(thread.view)) == ["u0", "a0", "u7", "a7"]
    assert "a1" in thread.view.events and thread.view.events["u1"].parent_id == "a0"


def test_a_fork_before_any_message_starts_at_the_root_and_a_copy_of_the_latest_does_not_switch() -> None:
    thread = run([("turn", False)])
    assert (
        place(CID, (), fork=True, known=thread.view.events, active_leaf="a0", root="prompt").leaf == "prompt"
    )
    again = place(
        CID,
        thread.checkpoints[0].messages,
        fork=True,
        known=thread.view.events,
        active_leaf="a0",
        root="prompt",
    )
    assert again == Placement(None, [], frozenset({"u0", "a0"}))
