"""Step overhead: an agent step with an instant scripted model and an instant tool.

The real runtime (`convdb.producers.runtime.Runtime`, `Conversation.run`, here over an idempotent
`DurableSink`; a fleet runner writes through its partition's transactional sink instead) runs
one conversation whose scripted plan calls an instant tool N times, then answers. The
runtime's own counters (`RunStats`) give each step's time minus LLM and tool time; within that,
the time spent waiting for broker acknowledgements is reported apart. Two tools: a read-only
one (one durable write per step for the proposal, one for the observation) and a keyed one
(the effect protocol adds EffectProposed, EffectStarted and EffectConfirmed).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, ClassVar

from bench.common import BenchContext, BenchError, Figures, drop_namespace, median
from convdb.infra.settings import Settings
from convdb.producers.agent import Agent
from convdb.producers.conversation import Conversation
from convdb.producers.llm import DirectScriptedClient
from convdb.producers.publisher import EventPublisher
from convdb.producers.runtime import Runtime
from convdb.producers.sink import DurableSink
from convdb.producers.tools.base import Operation, Tool, ToolArgs, ToolResult
from convdb.schemas import make_codec
from convdb.schemas._types import EffectClass
from convdb.schemas.topics import ALL_TOPICS

FIGURES = {
    "step_overhead_ms": ("agent step overhead (read-only instant tool), excl. LLM + tool", "ms/step", "<= 2"),
    "step_publish_ms": ("  of which waiting for broker acks", "ms/step", ""),
    "step_cpu_ms": ("  overhead minus ack wait (wall)", "ms/step", "<= 1"),
    "step_thread_cpu_ms": (
        "  CPU of the step's thread (time.thread_time; scripted model and tool included)",
        "ms/step",
        "<= 1",
    ),
    "step_effect_overhead_ms": ("agent step overhead, keyed tool (effect protocol)", "ms/step", ""),
    "step_effect_publish_ms": ("  of which waiting for broker acks", "ms/step", ""),
}


class StepArgs(ToolArgs):
    """Arguments of the instant tools: a step number, so no two steps look alike (no stuck stop)."""

    n: int = 0


class InstantTool(Tool):
    """A read-only tool that returns at once."""

    name: ClassVar[str] = "instant"
    description: ClassVar[str] = "Returns at once."
    effect_class: ClassVar[EffectClass] = "read_only"
    Args: ClassVar[type[ToolArgs]] = StepArgs

    def execute(self, operation: Operation) -> ToolResult:
        """An immediate result."""
        return ToolResult(f"done {operation.arguments['n']}")


class InstantKeyedTool(InstantTool):
    """A keyed (idempotency-key) tool that returns at once with a receipt: the full effect protocol."""

    name: ClassVar[str] = "instant_keyed"
    effect_class: ClassVar[EffectClass] = "keyed"

    def execute(self, operation: Operation) -> ToolResult:
        """An immediate result with a provider receipt."""
        return ToolResult(f"done {operation.arguments['n']}", provider_receipt=operation.operation_id)


def run(ctx: BenchContext) -> Figures:
    """Median per-step overhead over `ctx.repeats` conversations of N steps, per tool."""
    steps = ctx.pick(100, 300)
    settings = ctx.fresh("step", ALL_TOPICS)
    settings = settings.model_copy(
        update={"runtime": settings.runtime.model_copy(update={"max_iterations": steps + 5})}
    )
    figures: Figures = {}
    try:
        publisher = EventPublisher(settings, make_codec(settings.schema_registry_url))
        for tool, prefix in ((InstantTool(), "step"), (InstantKeyedTool(), "step_effect")):
            runtime = _runtime(settings, publisher, tool)
            _conversation(runtime, tool, 10)  # warm-up: connections, first-call costs
            runs = [_conversation(runtime, tool, steps) for _ in range(ctx.repeats)]
            figures[f"{prefix}_overhead_ms"] = median([r["overhead"] for r in runs])
            figures[f"{prefix}_publish_ms"] = median([r["publish"] for r in runs])
            if prefix == "step":
                figures["step_cpu_ms"] = median([r["overhead"] - r["publish"] for r in runs])
                figures["step_thread_cpu_ms"] = median([r["cpu"] for r in runs])
        publisher.flush()
    finally:
        drop_namespace(settings)
    ctx.notes.append(
        f"step: {steps} tool steps + 1 answer per conversation, scripted model (direct, no litellm), "
        "idempotent producer, acks=all; overhead = step wall time - LLM latency - tool time"
    )
    return figures


def _runtime(settings: Settings, publisher: EventPublisher, tool: Tool) -> tuple[Runtime, DurableSink]:
    agent = Agent(tools=(tool,))
    return Runtime(settings, publisher.codec, agent, DirectScriptedClient()), DurableSink(publisher)


def _conversation(runtime: tuple[Runtime, DurableSink], tool: Tool, steps: int) -> dict[str, Any]:
    conv: Conversation = runtime[0].create(f"step-{uuid.uuid4().hex[:10]}", "bench", runtime[1])
    plan = "\n".join(f'!{tool.name} {{"n": {i}}}' for i in range(steps))
    conv.send_message(f"Call the tool {steps} times.\n{plan}")
    cpu = time.thread_time()
    status = conv.run()
    cpu = time.thread_time() - cpu
    stats = conv.stats
    if status != "finished" or stats.steps != steps + 1:
        raise BenchError(f"step: conversation ended {status!r} after {stats.steps} steps, wanted {steps + 1}")
    return {
        "overhead": stats.overhead_ms / stats.steps,
        "publish": stats.step_publish_ms / stats.steps,
        "cpu": cpu * 1000 / stats.steps,
    }
