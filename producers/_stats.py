"""Run statistics of a conversation (kept in snapshots as JSON)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields


@dataclass
class RunStats:
    """Counters of one conversation; `overhead_ms` is step time minus LLM and tool time."""

    steps: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    llm_ms: float = 0.0
    tool_ms: float = 0.0
    overhead_ms: float = 0.0
    publish_ms: float = 0.0
    step_publish_ms: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add_tool_time(self, seconds: float) -> None:
        """Count time spent inside tools (thread-safe: parallel actions call it)."""
        with self._lock:
            self.tool_ms += seconds * 1000

    def add_usage(self, prompt: int, completion: int, cost: float | None, latency_ms: float) -> None:
        """Count one LLM call."""
        self.llm_calls += 1
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.cost += cost or 0.0
        self.llm_ms += latency_ms

    def add_publish_time(self, seconds: float) -> None:
        """Count time spent waiting for the broker's acknowledgements."""
        with self._lock:
            self.publish_ms += seconds * 1000

    def count_step(self, overhead_ms: float, publish_ms: float) -> None:
        """Count one step, its overhead (step time minus LLM and tool time) and, within that,
        the time spent waiting for the broker."""
        self.steps += 1
        overhead = max(0.0, overhead_ms)
        self.overhead_ms += overhead
        # Within the overhead: parallel actions count their tool time once per thread, so the
        # overhead of such a step can come out below its broker wait (a negative CPU overhead).
        self.step_publish_ms += min(max(0.0, publish_ms), overhead)

    @property
    def overhead_per_step_ms(self) -> float:
        """Mean runtime overhead per agent step (excludes LLM and tool time)."""
        return self.overhead_ms / self.steps if self.steps else 0.0

    def as_dict(self) -> dict[str, float | int]:
        """Plain values for JSON."""
        data: dict[str, float | int] = {
            f.name: getattr(self, f.name) for f in fields(self) if f.name != "_lock"
        }
        data["overhead_per_step_ms"] = self.overhead_per_step_ms
        data["cpu_overhead_per_step_ms"] = (
            (self.overhead_ms - self.step_publish_ms) / self.steps if self.steps else 0.0
        )
        return data
