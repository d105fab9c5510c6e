"""`create_agent` middleware putting an agent's tool calls under convdb's effect protocol.

LangChain's `create_agent` runs its tools in a `ToolNode` and lets middleware wrap each call
(`AgentMiddleware.wrap_tool_call` / `awrap_tool_call`); `EffectMiddleware` is that hook with
`ToolEffects` behind it (`convdb.producers.graph_tools`): a tool call re-executed after a crash
returns its recorded answer, an unknown outcome goes to the human queue. Needs the `langchain`
package (in convdb's `langgraph` extra).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from langchain.agents.middleware import AgentMiddleware

from convdb.producers.graph_tools import AsyncExecute, Execute, Lookups, ToolEffects, ToolResult
from convdb.schemas._types import EffectClass

if TYPE_CHECKING:
    from langgraph.prebuilt.tool_node import ToolCallRequest


class EffectMiddleware(AgentMiddleware):
    """`create_agent(model, tools, middleware=[EffectMiddleware({...})])`: the agent's tool calls
    under convdb's effect protocol (the arguments are `ToolEffects`')."""

    def __init__(
        self, effects: EffectClass | Mapping[str, EffectClass], lookup: Lookups | None = None
    ) -> None:
        super().__init__()
        self.effects = ToolEffects(effects, lookup)

    def wrap_tool_call(self, request: ToolCallRequest, handler: Execute) -> ToolResult:
        return self.effects.wrap_tool_call(request, handler)

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncExecute) -> ToolResult:
        return await self.effects.awrap_tool_call(request, handler)
