"""LangGraph on convdb (`pip install convdb[langgraph]`, docs/langgraph.md).

`ConvdbSaver(settings)` is a LangGraph checkpointer whose checkpoints and task writes are typed
records on the `graph` topic, keyed by thread id (= conversation id), each written in a Kafka
transaction by the fenced writer of the thread's partition. `@effect(...)` runs a node's or a
tool's provider call under convdb's effect protocol, so a node re-run after a crash never makes
the call twice; `ToolEffects` does the same for `ToolNode`'s tool calls
(`ToolNode(tools, wrap_tool_call=..., awrap_tool_call=...)`) and `EffectMiddleware` for
`create_agent`'s (imported on first use: it needs the `langchain` package).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from convdb.producers.graph_effects import Lookup, effect
from convdb.producers.graph_saver import ConvdbSaver, graph_transactional_id
from convdb.producers.graph_tools import ToolEffects, idempotency_key
from convdb.projections.settlement import LookupResult

if TYPE_CHECKING:
    from convdb.producers.graph_middleware import EffectMiddleware

__all__ = [
    "ConvdbSaver",
    "EffectMiddleware",
    "Lookup",
    "LookupResult",
    "ToolEffects",
    "effect",
    "graph_transactional_id",
    "idempotency_key",
]


def __getattr__(name: str) -> Any:
    """`EffectMiddleware` on first use, so `convdb.langgraph` works without `langchain`."""
    if name == "EffectMiddleware":
        from convdb.producers.graph_middleware import EffectMiddleware

        return EffectMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
