"""LangGraph supersteps on three checkpointers: convdb's saver, LangGraph's SqliteSaver, InMemorySaver.

One graph, one node that adds to a counter and loops until it has run N supersteps, invoked with
`durability="sync"` (each superstep's checkpoint is durable before the next starts). The node is
instant, so a superstep's wall time is the checkpointer's overhead plus LangGraph's own: the
in-memory saver's figure is LangGraph's floor. convdb's saver pays one Kafka transaction per
`put` and per `put_writes`; SQLite writes a file in the work directory.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any, TypedDict

from bench.common import BenchContext, Figures, drop_namespace, median
from convdb.schemas.topics import GRAPH

FIGURES = {
    "langgraph_convdb_steps_per_s": (
        "LangGraph supersteps/s, convdb's saver (sync durability)",
        "steps/s",
        "",
    ),
    "langgraph_convdb_p99_ms": ("  p99 superstep time, convdb's saver", "ms", ""),
    "langgraph_sqlite_steps_per_s": ("LangGraph supersteps/s, SqliteSaver (file)", "steps/s", ""),
    "langgraph_sqlite_p99_ms": ("  p99 superstep time, SqliteSaver", "ms", ""),
    "langgraph_memory_steps_per_s": ("LangGraph supersteps/s, InMemorySaver", "steps/s", ""),
    "langgraph_memory_p99_ms": ("  p99 superstep time, InMemorySaver", "ms", ""),
}


class Loop(TypedDict):
    """A counter the node raises by one per superstep."""

    n: int


def loop_graph(saver: Any, steps: int) -> Any:
    """`tick` until `n == steps`."""
    from langgraph.graph import END, START, StateGraph

    def tick(state: Loop) -> dict[str, int]:
        return {"n": state["n"] + 1}

    builder = StateGraph(Loop)
    builder.add_node("tick", tick)
    builder.add_edge(START, "tick")
    builder.add_conditional_edges("tick", lambda s: END if s["n"] >= steps else "tick")
    return builder.compile(checkpointer=saver)


def measure(saver: Any, steps: int, thread: str) -> tuple[float, float]:
    """(supersteps/s, p99 superstep ms) of one run of `steps` supersteps."""
    graph = loop_graph(saver, steps)
    config = {"configurable": {"thread_id": thread}, "recursion_limit": steps + 10}
    gaps: list[float] = []
    started = last = time.perf_counter()
    for _ in graph.stream({"n": 0}, config, stream_mode="updates", durability="sync"):
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    total = time.perf_counter() - started
    gaps.sort()
    return len(gaps) / total, gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))] * 1000


def run(ctx: BenchContext) -> Figures:
    """Median over `ctx.repeats` runs of each saver (a fresh thread per run)."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    from convdb.langgraph import ConvdbSaver

    steps = ctx.pick(200, 1000)
    settings = ctx.fresh("langgraph", (GRAPH,))
    convdb_saver = ConvdbSaver(settings)
    convdb_saver.open()
    sqlite_saver = SqliteSaver(sqlite3.connect(ctx.workdir / "langgraph.sqlite", check_same_thread=False))
    savers: dict[str, Callable[[], Any]] = {
        "convdb": lambda: convdb_saver,
        "sqlite": lambda: sqlite_saver,
        "memory": InMemorySaver,
    }
    figures: Figures = {}
    try:
        for name, make in savers.items():
            runs = [measure(make(), steps, f"{name}-{i}") for i in range(ctx.repeats)]
            figures[f"langgraph_{name}_steps_per_s"] = median([r[0] for r in runs])
            figures[f"langgraph_{name}_p99_ms"] = median([r[1] for r in runs])
    finally:
        convdb_saver.close()
        drop_namespace(settings)
    ctx.notes.append(
        f"langgraph: {steps} supersteps per run, durability=sync; the thread is opened (partition "
        "taken) before the clock starts"
    )
    return figures
