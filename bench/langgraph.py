"""LangGraph supersteps on three checkpointers: convdb's saver, LangGraph's SqliteSaver, InMemorySaver;
and the same loop run by a hosted runner (`convdb runner --graph`).

One graph, one node that adds to a counter and loops until it has run N supersteps, invoked with
`durability="sync"` (each superstep's checkpoint is durable before the next starts). The node is
instant, so a superstep's wall time is the checkpointer's overhead plus LangGraph's own: the
in-memory saver's figure is LangGraph's floor. convdb's saver pays one Kafka transaction per
`put` and per `put_writes`; SQLite writes a file in the work directory.

Hosted: a real `python -m convdb runner --graph bench.langgraph:hosted_loop` process runs the loop
for a user message whose content is N (the graph keeps a `messages` channel, as hosted graphs
must). Its checkpoints and task writes go through the partition's fenced transactional writer
(the conversation's commit, with its status events). The figures come from the root checkpoints
the runner wrote (their timestamps, taken when each was recorded): supersteps/s from the first
to the last, and the p99 of the gaps between consecutive ones; the process start-up and the
partition's takeover are outside both.
"""

from __future__ import annotations

import sqlite3
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypedDict

from bench.common import BenchContext, BenchError, Figures, drop_namespace, median
from convdb.infra.procs import spawn, tail
from convdb.infra.producer import DurableProducer
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.schemas import InboxMessage, make_codec
from convdb.schemas.graph import GraphCheckpoint
from convdb.schemas.topics import GRAPH, INBOX

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
    "langgraph_hosted_steps_per_s": (
        "LangGraph supersteps/s, hosted (a convdb runner process, fenced writer)",
        "steps/s",
        "",
    ),
    "langgraph_hosted_p99_ms": (
        "  p99 superstep time, hosted (between checkpoint records; the node is instant: all overhead)",
        "ms",
        "",
    ),
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


def hosted_loop(_settings: Settings) -> Any:
    """The loop as a hosted graph: `tick` until `n` is the number the user's message says."""
    from langchain_core.messages import AnyMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages

    # The functional form: its types are evaluated here (this module's annotations are strings).
    State = TypedDict("State", {"messages": Annotated[list[AnyMessage], add_messages], "n": int})  # noqa: UP013

    def tick(state: Any) -> dict[str, int]:
        return {"n": state.get("n", 0) + 1}

    def until(state: Any) -> str:
        return END if state["n"] >= int(state["messages"][-1].content) else "tick"

    builder = StateGraph(State)
    builder.add_node("tick", tick)
    builder.add_edge(START, "tick")
    builder.add_conditional_edges("tick", until)
    return builder.compile().with_config(recursion_limit=1_000_000)


def hosted_namespace(ctx: BenchContext) -> Settings:
    """A fresh namespace for the hosted runs (the scripted model run directly: no litellm import
    in the runner, which never calls a model here)."""
    settings = ctx.fresh("langgraph-hosted")
    llm = settings.llm.model_copy(update={"scripted_backend": "direct"})
    return settings.model_copy(update={"llm": llm})


def measure_hosted(ctx: BenchContext, settings: Settings, steps: int, run: int) -> tuple[float, float]:
    """(supersteps/s, p99 superstep ms) of one conversation run by one runner process."""
    cid = f"lg-hosted-{run}-{uuid.uuid4().hex[:6]}"
    codec = make_codec(settings.schema_registry_url)
    message = InboxMessage(
        id=str(uuid.uuid4()), conversation_id=cid, tenant_id="bench",
        timestamp=datetime.now(UTC), command="message", content=str(steps),
    )  # fmt: skip
    producer = DurableProducer(settings)
    producer.produce_raw(INBOX.name(settings.namespace), cid, codec.encode(message))
    producer.flush(60)
    log = ctx.workdir / f"{settings.namespace}-runner-{run}.log"
    argv = [sys.executable, "-m", "convdb", "runner", "--workspace", str(ctx.workdir / f"ws-{run}")]
    proc = spawn(
        [*argv, "--graph", "bench.langgraph:hosted_loop", "--idle-exit", "3"], log, settings.to_env()
    )
    try:
        code = proc.wait(timeout=600)
    except Exception as exc:  # noqa: BLE001 - subprocess.TimeoutExpired: say where it stood
        proc.kill()
        raise BenchError(f"the hosted runner did not finish in 600 s:\n{tail(log)}") from exc
    if code != 0:
        raise BenchError(f"the hosted runner exited {code}:\n{tail(log)}")
    stamps = sorted(
        r.timestamp.timestamp()
        for m in read_topic(settings, GRAPH.name(settings.namespace))
        if isinstance(r := codec.decode(m.value()), GraphCheckpoint)
        and r.conversation_id == cid
        and not r.checkpoint_ns
    )
    if len(stamps) < steps:  # the input's checkpoint, then one per superstep
        raise BenchError(
            f"the hosted runner wrote {len(stamps)} checkpoints for {steps} supersteps:\n{tail(log)}"
        )
    gaps = sorted(b - a for a, b in zip(stamps, stamps[1:], strict=False))
    return len(gaps) / (stamps[-1] - stamps[0]), gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))] * 1000


def run(ctx: BenchContext) -> Figures:
    """Median over `ctx.repeats` runs of each saver (a fresh thread per run), then of the hosted
    loop (a runner process per run)."""
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
    hosted = hosted_namespace(ctx)
    try:
        runs = [measure_hosted(ctx, hosted, steps, i) for i in range(ctx.repeats)]
        figures["langgraph_hosted_steps_per_s"] = median([r[0] for r in runs])
        figures["langgraph_hosted_p99_ms"] = median([r[1] for r in runs])
    finally:
        drop_namespace(hosted)
    ctx.notes.append(
        f"langgraph: {steps} supersteps per run, durability=sync; the thread is opened (partition "
        "taken) before the clock starts; hosted: one `convdb runner --graph` process per run, timed "
        "from its checkpoint records (start-up and takeover excluded)"
    )
    return figures
