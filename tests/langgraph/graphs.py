"""Small LangGraph graphs the saver's tests run."""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph


class Counter(TypedDict):
    """A counter and the log of the steps that added to it."""

    count: int
    steps: Annotated[list[str], operator.add]


def counter_graph(saver: BaseCheckpointSaver[str]) -> CompiledStateGraph:  # type: ignore[type-arg]
    """`add` then `double`: one invoke makes four checkpoints (input, and one per step)."""

    def add(state: Counter) -> dict[str, object]:
        return {"count": state["count"] + 1, "steps": ["add"]}

    def double(state: Counter) -> dict[str, object]:
        return {"count": state["count"] * 2, "steps": ["double"]}

    builder = StateGraph(Counter)
    builder.add_node("add", add)
    builder.add_node("double", double)
    builder.add_edge(START, "add")
    builder.add_edge("add", "double")
    builder.add_edge("double", END)
    return builder.compile(checkpointer=saver)
