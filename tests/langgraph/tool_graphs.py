"""Agent graphs whose tool charges a card: a `ToolNode` graph and a `create_agent` agent, their tool
calls under convdb's effect protocol (`ToolEffects`, `EffectMiddleware`).

The model is scripted (no network): it asks for `charge_card(amount=42)` (tool call id `call-1`)
until a tool answer is in the conversation, then says what the tool answered. The tool is the
crash demo's provider (`tests.langgraph.hosted_graph`: `CRASH_WORK`, `CRASH_AT`,
`CRASH_NO_LOOKUP`), charged under `idempotency_key()`; with `CRASH_TIMEOUT=1` the provider charges
and its answer is lost (the tool raises `OutcomeUnknownError`). As hosted graphs:
`convdb runner --graph tests.langgraph.tool_graphs:make_tool_node` (or `:make_agent`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from convdb.langgraph import EffectMiddleware, ToolEffects, idempotency_key
from convdb.producers.errors import OutcomeUnknownError
from tests.langgraph.hosted_graph import provider_charge, provider_lookup


class ScriptedModel(BaseChatModel):
    """Asks for the charge, then reports the tool's answer."""

    def _generate(self, messages: list[BaseMessage], *_: Any, **__: Any) -> ChatResult:
        answers = [m for m in messages if isinstance(m, ToolMessage)]
        if answers:
            reply = AIMessage(content=f"Charged: {answers[-1].content}", id="reply-1")
        else:
            call = {"name": "charge_card", "args": {"amount": 42}, "id": "call-1", "type": "tool_call"}
            reply = AIMessage(content="", tool_calls=[call], id="ask-1")
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def bind_tools(self, _tools: Sequence[Any], **__: Any) -> ScriptedModel:  # type: ignore[override]
        return self

    @property
    def _llm_type(self) -> str:
        return "scripted-tools"


@tool
def charge_card(amount: int) -> str:
    """Charge the customer's card."""
    assert amount == 42
    receipt = provider_charge(idempotency_key())
    if os.environ.get("CRASH_TIMEOUT"):
        raise OutcomeUnknownError("the provider timed out after the charge request was sent")
    return json.dumps(receipt)


def lookups() -> dict[str, Callable[[str], Any]]:
    return {} if os.environ.get("CRASH_NO_LOOKUP") else {"charge_card": provider_lookup}


def make_tool_node(_settings: Any = None) -> Any:
    """`agent -> tools -> agent`, LangGraph's prebuilt ToolNode with convdb's wrapper."""
    effects = ToolEffects({"charge_card": "irreversible"}, lookup=lookups())
    model = ScriptedModel()

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    tools = ToolNode(
        [charge_card], wrap_tool_call=effects.wrap_tool_call, awrap_tool_call=effects.awrap_tool_call
    )
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder


def make_agent(_settings: Any = None) -> Any:
    """LangChain's `create_agent` with convdb's middleware (compiled: the runner copies it with its
    checkpointer)."""
    from langchain.agents import create_agent

    middleware = EffectMiddleware({"charge_card": "irreversible"}, lookup=lookups())
    return create_agent(ScriptedModel(), [charge_card], middleware=[middleware])
