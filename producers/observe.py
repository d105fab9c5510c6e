"""What a runner shows an operator: Prometheus metrics of its steps, LLM use and operations.

`RunnerMetrics` is handed to the conversations of one runner process (through `Services`); the
run loop reports each step's duration, and every record a conversation commits is observed once:
LLM usage gives tokens and cost, ledger records give operations by state. `NO_METRICS` is the
do-nothing default for conversations outside a runner (tests, benchmarks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from convdb.schemas import LLMUsageEvent
from convdb.schemas.records import LEDGER_TYPES

LEDGER_STATES = {
    "effect_proposed": "proposed",
    "effect_started": "executing",
    "effect_confirmed": "confirmed",
    "effect_failed": "failed",
    "effect_unknown": "unknown",
    "effect_resolved": "resolved",
}
"""Ledger record kind -> the operation state it records (`resolved`: a human or lookup decided)."""

REFUSAL_REASONS = ("tenant", "invalid", "partition", "too_large", "failed", "log", "agent", "history")
"""The `reason` label of `convdb_runner_refused_records`."""


class RunnerMetrics:
    """A runner's counters, in their own registry (several runners may share a test process)."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.steps = Counter("convdb_runner_steps", "Agent steps run", registry=r)
        self.step_seconds = Histogram(
            "convdb_runner_step_seconds",
            "Wall time of one agent step: LLM call, tool calls and the records they write",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=r,
        )
        self.llm_calls = Counter("convdb_runner_llm_calls", "LLM calls", ["model"], registry=r)
        self.llm_tokens = Counter(
            "convdb_runner_llm_tokens",
            "LLM tokens by model and direction",
            ["model", "direction"],
            registry=r,
        )
        self.llm_cost = Counter(
            "convdb_runner_llm_cost_usd", "LLM cost in USD (priced calls)", ["model"], registry=r
        )
        self.operations = Counter(
            "convdb_runner_operations",
            "Effect ledger records written, by the operation state they record",
            ["state"],
            registry=r,
        )
        self.inbox = Counter("convdb_runner_inbox_records", "Inbox records handled", registry=r)
        self.refused = Counter(
            "convdb_runner_refused_records",
            "Records dead-lettered, by reason (tenant: another tenant than the conversation's; "
            "partition: on another partition than its key maps to; too_large: what it makes exceeds "
            "the record limit; failed: its handling raised an unforeseen error; log: an events, state "
            "or effects record a restore could not use)",
            ["reason"],
            registry=r,
        )
        for reason in REFUSAL_REASONS:
            self.refused.labels(reason)
        self.partitions = Gauge("convdb_runner_partitions", "Inbox partitions this runner owns", registry=r)
        self.write_failures = Counter(
            "convdb_runner_write_failures",
            "Failed writes (or rebuilds) of an owned partition, each retried from the log",
            registry=r,
        )
        self.stalled = Gauge(
            "convdb_runner_stalled_partitions",
            "Owned partitions whose writes keep failing with no progress (also a /healthz problem)",
            registry=r,
        )
        self.progress: Callable[[], None] = _nothing
        """Called at every step and commit: the runner's health heartbeat during a long run."""
        for record_type in LEDGER_TYPES:
            self.operations.labels(LEDGER_STATES.get(record_type.model_fields["kind"].default, "other"))

    def register(self, registry: CollectorRegistry) -> None:
        """Also expose these series through another registry (the runner's ops endpoint)."""
        for collector in (
            self.steps, self.step_seconds, self.llm_calls, self.llm_tokens, self.llm_cost,
            self.operations, self.inbox, self.refused, self.partitions, self.write_failures,
            self.stalled,
        ):  # fmt: skip
            registry.register(collector)

    def step(self, seconds: float) -> None:
        """One agent step ended."""
        self.steps.inc()
        self.step_seconds.observe(seconds)
        self.progress()

    def committed(self, records: Iterable[object]) -> None:
        """Records a conversation made durable: LLM usage and ledger transitions are counted."""
        self.progress()
        for record in records:
            if isinstance(record, LLMUsageEvent):
                self.llm_calls.labels(record.model).inc()
                self.llm_tokens.labels(record.model, "prompt").inc(record.prompt_tokens)
                self.llm_tokens.labels(record.model, "completion").inc(record.completion_tokens)
                if record.cost:
                    self.llm_cost.labels(record.model).inc(record.cost)
            elif isinstance(record, LEDGER_TYPES):
                self.operations.labels(LEDGER_STATES.get(record.kind, "other")).inc()


def _nothing() -> None:
    """No heartbeat to give."""


class _NoMetrics(RunnerMetrics):
    """Counts nothing (a conversation outside a runner process)."""

    def __init__(self) -> None:
        """No registry, no series."""

    def step(self, seconds: float) -> None:  # noqa: ARG002 - the interface's argument
        """Ignored."""

    def committed(self, records: Iterable[object]) -> None:  # noqa: ARG002 - the interface's argument
        """Ignored."""


NO_METRICS: RunnerMetrics = _NoMetrics()
"""The default for conversations that no runner observes."""
