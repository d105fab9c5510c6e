"""A small chat graph for the history commands on a hosted thread (`test_history.py`).

`reply -> count` on a `messages` channel: `reply` answers the last user message with an
AIMessage (with usage) that says which turn it is, `count` then counts the turn in a channel of
its own (a node after the message that changes no message: a branch at the answer of the latest
turn re-runs nothing).
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from convdb.infra.settings import Settings


class Chat(TypedDict, total=False):
    """The conversation and how many turns were answered on this lineage."""

    messages: Annotated[list[AnyMessage], add_messages]
    turns: int


def make(_settings: Settings) -> Any:
    """The graph (a `StateGraph`: the runner compiles it with its partition's checkpointer)."""

    def reply(state: Chat) -> dict[str, Any]:
        asked = state["messages"][-1].content
        answer = AIMessage(
            content=f"echo {asked} (turn {state.get('turns', 0) + 1})",
            usage_metadata={"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
            response_metadata={"model_name": "scripted-echo"},
        )
        return {"messages": [answer]}

    def count(state: Chat) -> dict[str, Any]:
        return {"turns": state.get("turns", 0) + 1}

    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_node("count", count)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", "count")
    builder.add_edge("count", END)
    return builder
