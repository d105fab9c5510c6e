"""The capacity model checked by simulation: a plan scaled down to this machine, run for real.

`bench.capmodel.plan` sizes a load of live conversations at 2 events/s each; here the load is
1/200 (small) or 1/100 (large) of the 10k case, and the step latency is the simulation's own
(the scripted model's 50 ms, not a provider's second: this machine runs a handful of runners,
not hundreds). The plan's runners (`convdb runner`) and read-side processes (`convdb consume
all`, SQLite) run on the plan's partitions while the inbox pacer offers the load; then the
measured events/s, steps/s, step gaps, runner CPU per step and read-side rate are set beside
the model's prediction (`capmodel.predict`). The archive's bytes/s, which the model needs and
no other bench measures, is measured here too (`convdb consume archive` to a folder).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from bench.capmodel import MEASURED, Assumptions, Prediction, plan, predict
from bench.common import (
    BenchContext,
    BenchError,
    Figures,
    consumer_events_applied,
    drop_namespace,
    metric_sum,
)
from bench.fleetprocs import (
    Pacer,
    RunnerChild,
    conversation_ids,
    fleet_lines,
    namespace,
    owners,
    read_events,
    read_steps,
    send_all,
    wait_for,
)
from bench.fleetstats import gaps_in, percentile
from convdb.infra.procs import free_port, spawn, stop_group
from convdb.infra.settings import Settings

SIM_LATENCY_S = 0.05
"""The scripted model's time per turn in the simulation."""

FIGURES = {
    "capacity_conversations": (
        "simulation: live conversations (the 10k case scaled down)",
        "conversations",
        "",
    ),
    "capacity_runners": ("simulation: runner processes the model plans", "processes", ""),
    "capacity_partitions": ("simulation: partitions the model plans", "partitions", ""),
    "capacity_consumers": ("simulation: `consume all` processes the model plans", "processes", ""),
    "capacity_predicted_events_per_s": ("model: events/s", "events/s", ""),
    "capacity_events_per_s": ("measured: events/s written", "events/s", "= model"),
    "capacity_predicted_steps_per_s": ("model: steps/s", "steps/s", ""),
    "capacity_steps_per_s": ("measured: steps/s", "steps/s", "= model"),
    "capacity_predicted_gap_s": ("model: usual step gap (pacing + wait for a runner)", "s", ""),
    "capacity_gap_p50_s": ("measured: step gap p50", "s", "= model"),
    "capacity_gap_p99_s": ("measured: step gap p99", "s", ""),
    "capacity_predicted_runner_busy": ("model: runner busy fraction", "ratio", "<= 0.5"),
    "capacity_runner_cpu_ms_per_step": (
        "measured: runner CPU per step (all runner processes)",
        "ms/step",
        "",
    ),
    "capacity_model_cpu_ms_per_step": ("model: runner CPU per step (capmodel.MEASURED)", "ms/step", ""),
    "capacity_runner_cpu_share": ("measured: runner CPU, share of one core per runner", "ratio", ""),
    "capacity_events_per_step": ("measured: events per step", "events/step", ""),
    "capacity_event_bytes": ("measured: mean event record size", "bytes", ""),
    "capacity_read_events_per_s": (
        "measured: records/s the read side applied (consume all)",
        "records/s",
        "",
    ),
    "capacity_archive_bytes_per_s": ("archive sink, one process, to a folder: record bytes/s", "bytes/s", ""),
}


def run(ctx: BenchContext) -> Figures:
    """The scaled-down plan, run; then the archive's rate."""
    conversations = ctx.pick(50, 100)
    window = ctx.pick(30, 60)
    figures = simulate(ctx, conversations, float(window))
    figures["capacity_archive_bytes_per_s"] = archive_rate(ctx, ctx.pick(20_000, 80_000))
    return figures


def simulate(ctx: BenchContext, conversations: int, window_s: float) -> Figures:
    """Run the plan for `conversations` for `window_s` seconds of steady load."""
    assumed = Assumptions(step_latency_s=SIM_LATENCY_S)
    planned = plan(conversations, MEASURED, assumed)
    expected = predict(planned, MEASURED, assumed)
    settings = namespace(ctx, "capacity", planned.partitions, SIM_LATENCY_S * 1000)
    settings = settings.model_copy(update={"store_url": f"sqlite:///{settings.data_dir / 'store.db'}"})
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    runners = [
        RunnerChild(f"runner-{i}", settings.model_copy(update={"data_dir": settings.data_dir / f"r{i}"}),
                    settings.data_dir / f"runner-{i}.log", settings.data_dir / "ws").start()
        for i in range(planned.runners)
    ]  # fmt: skip
    consumers = [_consumer(settings, i) for i in range(planned.consumers)]
    pacer: Pacer | None = None
    try:
        wait_for(
            lambda: len(owners(fleet_lines(runners), {}, time.time())) == planned.partitions,
            120,
            "every partition assigned",
            runners,
        )
        live = conversation_ids("cap", conversations)
        send_all(settings, live, "hello")
        wait_for(
            lambda: all(read_steps(settings, committed=False).times.get(c) for c in live),
            120,
            "first steps",
            runners,
            1.0,
        )
        pacer = Pacer(settings, live, MEASURED.events_per_step / assumed.events_per_s_each)
        pacer.start()
        time.sleep(2 * expected.step_gap_s)
        measured = _measure(settings, runners, consumers, window_s, live, pacer)
    finally:
        if pacer is not None:
            pacer.stop()
        for runner in runners:
            runner.stop()
        for proc, _ in consumers:
            stop_group(proc.pid)
        drop_namespace(settings)
    figures: Figures = {
        "capacity_conversations": float(conversations),
        "capacity_runners": float(planned.runners),
        "capacity_partitions": float(planned.partitions),
        "capacity_consumers": float(planned.consumers),
        **_predicted(expected),
        **measured,
        "capacity_model_cpu_ms_per_step": MEASURED.runner_cpu_ms_per_step,
    }
    ctx.notes.append(
        f"capacity: {conversations} live conversations at {assumed.events_per_s_each:g} events/s each "
        f"(1/{10_000 // conversations} of the 10k case), scripted model {SIM_LATENCY_S * 1000:g} ms per "
        f"step; the model's plan: {planned.runners} runners, {planned.partitions} partitions, "
        f"{planned.consumers} `consume all` (SQLite); {window_s:g} s measured after a warm-up; runner CPU "
        "from /proc (utime+stime of the runner processes) over the steps they wrote in that span"
    )
    return figures


def _predicted(expected: Prediction) -> Figures:
    return {
        "capacity_predicted_events_per_s": expected.events_per_s,
        "capacity_predicted_steps_per_s": expected.steps_per_s,
        "capacity_predicted_gap_s": expected.step_gap_s,
        "capacity_predicted_runner_busy": expected.runner_busy,
    }


def _measure(
    settings: Settings, runners: list[RunnerChild], consumers: list[tuple[object, int]], window_s: float,
    live: list[str], pacer: Pacer,
) -> Figures:  # fmt: skip
    cpu0 = sum(_cpu_s(r.proc.pid) for r in runners)
    applied0 = sum(consumer_events_applied(port) for _, port in consumers)
    t0 = time.time()
    time.sleep(window_s)
    t1 = time.time()
    cpu1 = sum(_cpu_s(r.proc.pid) for r in runners)
    applied1 = sum(consumer_events_applied(port) for _, port in consumers)
    pacer.stop()  # runners go idle: a committed read reaches the end (`read_events`)
    time.sleep(2)
    steps = read_steps(settings)
    count = steps.count_between(t0, t1)
    if count == 0:
        raise BenchError("capacity: no steps in the measured span")
    events, size = _events_between(settings, t0, t1)
    gaps = [g for cid in live for g in gaps_in(steps.times.get(cid, []), t0, t1, float("inf"))]
    return {
        "capacity_events_per_s": events / (t1 - t0),
        "capacity_steps_per_s": count / (t1 - t0),
        "capacity_gap_p50_s": percentile(gaps, 0.5),
        "capacity_gap_p99_s": percentile(gaps, 0.99),
        "capacity_runner_cpu_ms_per_step": (cpu1 - cpu0) * 1000 / count,
        "capacity_runner_cpu_share": (cpu1 - cpu0) / (t1 - t0) / len(runners),
        "capacity_events_per_step": events / count,
        "capacity_event_bytes": size / max(1, events),
        "capacity_read_events_per_s": (applied1 - applied0) / (t1 - t0),
    }


def _events_between(settings: Settings, t0: float, t1: float) -> tuple[int, int]:
    """Events written in [t0, t1) (by their broker timestamps), and their bytes."""
    count = size = 0
    for msg in read_events(settings):
        at = msg.timestamp()[1] / 1000
        if t0 <= at < t1:
            count += 1
            size += len(msg.value() or b"")
    return count, size


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _consumer(settings: Settings, i: int) -> tuple[object, int]:
    port = free_port()
    argv = [sys.executable, "-m", "convdb", "consume", "all", "--metrics-port", str(port)]
    return spawn(argv, settings.data_dir / f"consume-{i}.log", settings.to_env()), port


def archive_rate(ctx: BenchContext, count: int) -> float:
    """Record bytes/s one `convdb consume archive` process stores (to a folder).

    Clocked from its first stored object to the last one closed by count (the objects of each
    partition's remainder close by age, a minute later, and are not waited for).
    """
    from bench.sink import interleaved
    from bench.sinkrun import fill_topic

    settings = ctx.fresh("archive")
    folder = settings.data_dir / "archive"
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    settings = settings.model_copy(
        update={
            "archive_url": f"file://{folder}",
            "ops": settings.ops.model_copy(update={"port": port}),
            "archive": settings.archive.model_copy(update={"max_records": 1000, "topics": ("events",)}),
        }
    )
    events = interleaved(count)
    fill_topic(settings, events)
    record_bytes = sum(len(m.value() or b"") for m in read_events(settings))
    argv = [sys.executable, "-m", "convdb", "consume", "archive"]
    proc = spawn(argv, settings.data_dir / "archive.log", settings.to_env())
    try:
        first: tuple[float, float] | None = None
        deadline = time.monotonic() + 300
        while True:
            records = _archived(port)
            now = time.monotonic()
            if first is None and records > 0:
                first = (now, records)
            if first is not None and records >= 0.75 * count:
                break
            if proc.poll() is not None or now > deadline:
                raise BenchError(f"archive: {records:.0f} of {count} records stored; see {settings.data_dir}")
            time.sleep(0.02)
        if now <= first[0]:
            raise BenchError("archive: everything was stored in one poll: use more records")
        return (records - first[1]) / (now - first[0]) * record_bytes / count
    finally:
        stop_group(proc.pid)
        drop_namespace(settings)


def _archived(port: int) -> float:
    """Records the archive counts as stored for the events topic so far."""
    return metric_sum(port, "convdb_archive_records_total", ".events")
