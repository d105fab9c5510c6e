"""The capacity model: partitions, processes and brokers for a load (pure; formulas in one place).

`docs/capacity.md`'s table is `plan(...)` of its loads with `MEASURED` and `ASSUMED`
(`tests/bench/test_capacity_model.py` checks the doc against it), and `python -m bench --only
capacity` runs a plan scaled down to this machine and compares what it sees with `predict`.

Every process count is `ceil(demand / (capacity per process * UTILIZATION))`: a process is
planned to be busy half the time, so a rebalance's backlog is caught up at twice the load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

UTILIZATION = 0.5
"""The planned busy fraction of every process and broker (headroom for catch-up after a pause)."""


@dataclass(frozen=True)
class Figures:
    """Per-process capacities and per-step costs (`MEASURED`; the simulation measures its own)."""

    runner_cpu_ms_per_step: float
    """CPU one runner process spends per agent step (transactions, snapshots, polling included)."""
    events_per_step: float
    """Events written to the events topic per agent step."""
    consumer_events_per_s: float
    """`convdb consume all` (views, index, titles, stats, effects), one process, PostgreSQL."""
    store_events_per_s: float
    """What one PostgreSQL store took from two `consume all` processes (a floor: not saturated)."""
    archive_bytes_per_s: float
    """Archive sink, one process, bytes of records stored per second."""
    api_requests_per_s: float
    """One API process: write requests per second (webhook batches, durable before 2xx)."""
    restore_ms_per_conversation: float
    """A partition's takeover per conversation it holds (the slope of the takeover curve)."""


@dataclass(frozen=True)
class Assumptions:
    """What the model is not measured on here (each stated in docs/capacity.md)."""

    events_per_s_each: float = 2.0
    """Load: events per second per live conversation."""
    step_latency_s: float = 1.0
    """LLM (and tool) time a step waits; a runner process runs one step at a time."""
    steps_in_flight: int = 1
    """Steps one runner process has under way at once (1: today's sequential runner)."""
    takeover_budget_s: float = 2.0
    """Most time a moved partition may take to serve again: bounds conversations per partition."""
    inbox_messages_per_s_each: float = 1 / 60
    """User messages (API writes) per live conversation per second."""
    broker_write_bytes_per_s: float = 30e6
    """Bytes per second one broker takes in, replicas included (a conservative disk/network budget)."""
    replication: int = 3
    """Copies of every record (the 3-broker cluster's replication factor)."""
    event_bytes: float = 1024.0
    """Mean size of an event record on the wire (the benches' agent-shaped 1 KB event)."""
    snapshot_overhead: float = 0.25
    """State, effects and inbox bytes on top of the events' (snapshots every 100 events, ledger)."""


@dataclass(frozen=True)
class Plan:
    """What a load needs."""

    conversations: int
    events_per_s: float
    steps_per_s: float
    runners: int
    runner_cores: float
    partitions: int
    consumers: int
    stores: int
    archivers: int
    api_processes: int
    brokers: int
    conversations_per_partition: float


def need(demand: float, per_process: float) -> int:
    """Processes for a demand at `UTILIZATION` of each (at least one)."""
    return max(1, math.ceil(demand / (per_process * UTILIZATION)))


def runner_steps_per_s(figures: Figures, assumed: Assumptions) -> float:
    """One runner process's steps/s: bounded by its steps in flight over a step's wall time, and by a core."""
    step_s = assumed.step_latency_s + figures.runner_cpu_ms_per_step / 1000
    return min(assumed.steps_in_flight / step_s, 1000 / figures.runner_cpu_ms_per_step)


def plan(conversations: int, figures: Figures, assumed: Assumptions) -> Plan:
    """The processes, partitions and brokers for `conversations` live ones."""
    events = conversations * assumed.events_per_s_each
    steps = events / figures.events_per_step
    runners = need(steps, runner_steps_per_s(figures, assumed))
    consumers = need(events, figures.consumer_events_per_s)
    archivers = need(events * assumed.event_bytes, figures.archive_bytes_per_s)
    by_takeover = math.ceil(
        conversations * figures.restore_ms_per_conversation / 1000 / (assumed.takeover_budget_s * UTILIZATION)
    )
    partitions = max(runners, consumers, archivers, by_takeover)
    written = events * assumed.event_bytes * (1 + assumed.snapshot_overhead) * assumed.replication
    return Plan(
        conversations=conversations,
        events_per_s=events,
        steps_per_s=steps,
        runners=runners,
        runner_cores=steps * figures.runner_cpu_ms_per_step / 1000 / UTILIZATION,
        partitions=partitions,
        consumers=consumers,
        stores=need(events, figures.store_events_per_s),
        archivers=archivers,
        api_processes=need(conversations * assumed.inbox_messages_per_s_each, figures.api_requests_per_s),
        brokers=max(assumed.replication, need(written, assumed.broker_write_bytes_per_s)),
        conversations_per_partition=conversations / partitions,
    )


@dataclass(frozen=True)
class Prediction:
    """What a plan's processes should show under its load (the simulation checks these)."""

    events_per_s: float
    steps_per_s: float
    runner_busy: float
    """Fraction of the time a runner process has a step under way."""
    step_gap_s: float
    """A conversation's usual gap between steps: its pacing plus the wait for its runner."""


def predict(plan_: Plan, figures: Figures, assumed: Assumptions) -> Prediction:
    """Throughput, runner busy fraction and step gap of a plan at its load.

    The wait for a runner is an M/D/1 queue's: rho / (2 (1 - rho)) step times.
    """
    step_s = assumed.step_latency_s + figures.runner_cpu_ms_per_step / 1000
    busy = plan_.steps_per_s * step_s / (plan_.runners * assumed.steps_in_flight)
    wait = busy / (2 * (1 - busy)) * step_s if busy < 1 else math.inf
    period = figures.events_per_step / assumed.events_per_s_each
    return Prediction(plan_.events_per_s, plan_.steps_per_s, busy, period + step_s + wait)


MEASURED = Figures(
    runner_cpu_ms_per_step=9.7,
    events_per_step=5.0,
    consumer_events_per_s=4_207.0,
    store_events_per_s=6_878.0,
    archive_bytes_per_s=6.05e6,
    api_requests_per_s=645.7,
    restore_ms_per_conversation=0.23,
)
"""Per-process figures of this build (docs/capacity.md names the bench/RESULTS.md key of each)."""

ASSUMED = Assumptions()

LOADS = (10_000, 100_000)
"""The loads docs/capacity.md plans for (live conversations)."""


def with_latency(assumed: Assumptions, latency_s: float, in_flight: int = 1) -> Assumptions:
    """The same assumptions with another step latency and steps in flight per runner."""
    return replace(assumed, step_latency_s=latency_s, steps_in_flight=in_flight)


def table(figures: Figures = MEASURED, assumed: Assumptions = ASSUMED, loads: tuple[int, ...] = LOADS) -> str:
    """The Markdown table of docs/capacity.md: one column per load, today's runner and a concurrent one."""
    cases = [(n, assumed) for n in loads] + [(n, replace(assumed, steps_in_flight=CONCURRENT)) for n in loads]
    plans = [plan(n, figures, a) for n, a in cases]
    head = [
        f"{n:,} live, {a.steps_in_flight} step{'s' if a.steps_in_flight > 1 else ''}/runner" for n, a in cases
    ]
    rows = [
        ("events/s", lambda p: f"{p.events_per_s:,.0f}"),
        ("agent steps/s", lambda p: f"{p.steps_per_s:,.0f}"),
        ("runner processes", lambda p: f"{p.runners:,}"),
        ("runner cores (CPU at 50%)", lambda p: f"{p.runner_cores:,.1f}"),
        ("partitions", lambda p: f"{p.partitions:,}"),
        ("conversations per partition", lambda p: f"{p.conversations_per_partition:,.0f}"),
        ("`consume all` processes (PostgreSQL)", lambda p: f"{p.consumers:,}"),
        ("PostgreSQL stores", lambda p: f"{p.stores:,}"),
        ("archive processes", lambda p: f"{p.archivers:,}"),
        ("API processes (user messages)", lambda p: f"{p.api_processes:,}"),
        ("brokers", lambda p: f"{p.brokers:,}"),
    ]
    lines = ["| | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(cell(p) for p in plans) + " |")
    return "\n".join(lines)


CONCURRENT = 64
"""Steps in flight per runner process in the table's second half (a runner that does not wait for
one conversation's LLM before stepping another; not what the runner does today)."""
