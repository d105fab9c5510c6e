"""The runner fleet while it changes: step gaps of live conversations and takeover times.

12 partitions, 3 `convdb runner` processes, live scripted conversations stepping steadily (each
gets a user message every `period_s`; the scripted model waits `latency_ms` per turn, so the
runners wait rather than compute). Then, one after the other: (a) a 4th runner joins, (b) one
leaves gracefully (SIGTERM), (c) one is SIGKILLed (then restarted, unmeasured, as its
supervisor would), (d) every runner is restarted one by one under its name. Per event: the step
gaps (p50/p99/max) of conversations on partitions that kept their runner and on those that
moved, the takeover of each moved partition, and the fleet's steps/s; a quiet span before the
events gives the usual step gap the targets are ratios of. Steps are the runners' own
`LLMUsageEvent` timestamps in the events topic; moves come from the runners' status lines.

Then the takeover of one partition holding N conversations (`bench.fleettakeover`).
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, replace

from bench.common import BenchContext, BenchError, Figures, drop_namespace
from bench.fleetprocs import (
    Pacer,
    RunnerChild,
    Steps,
    conversation_ids,
    fleet_lines,
    namespace,
    owners,
    read_steps,
    send_all,
    wait_for,
)
from bench.fleetstats import Window, event_figures, usual_gap
from bench.fleettakeover import FIGURES as CURVE_FIGURES
from bench.fleettakeover import curve
from convdb.infra.kafka import group_timeouts_ms, rebalance_config
from convdb.infra.settings import Settings

PARTITIONS = 12


@dataclass(frozen=True)
class FleetSize:
    """How big a fleet run is (the bench's sizes, and the smoke test's `TINY`)."""

    live: int
    """Conversations stepping during the events."""
    idle_per_partition: int
    """Conversations that ran once and wait (restored at every takeover, never stepped)."""
    period_s: float
    """Each live conversation gets a message (one step) this often."""
    latency_ms: float
    """The scripted model's time per turn."""
    quiet_s: float
    """The span before the events whose gaps are the usual ones."""
    settle_s: float
    """An event ends once the assignment has not changed for this long."""
    takeover_sizes: tuple[int, ...]
    """Conversations in the one partition of the takeover curve."""
    probes: int
    """Conversations of that partition asked to step right after its takeover."""
    runners: int = 3
    """Runner processes before the first event."""
    events: tuple[str, ...] = ("a_join", "b_leave", "c_kill", "d_rolling")
    """The events run, in this order (the smoke test's tiny size leaves out the rolling restart)."""


EVENTS = ("a_join", "b_leave", "c_kill", "d_rolling")

APACHE_NOTE = (
    "on the 3-broker cluster every transaction waits for two replicas: on this shared 2-core "
    "machine two runners served about 1.5 steps/s each at saturation, so a quarter of the "
    "conversations, each stepping a quarter as often, keeps the runners below half busy"
)

SIZES = {
    "tiny": FleetSize(16, 0, 1.0, 10.0, 2.0, 1.5, (10, 30), 3, runners=2, events=EVENTS[:3]),
    "small": FleetSize(96, 10, 3.0, 20.0, 15.0, 6.0, (100, 1_000), 20),
    "large": FleetSize(300, 1_000, 3.0, 20.0, 30.0, 15.0, (100, 1_000, 10_000), 20),
}

_WHAT = {
    "a_join": "(a) a 4th runner joins",
    "b_leave": "(b) a runner leaves (SIGTERM)",
    "c_kill": "(c) a runner is SIGKILLed",
    "d_rolling": "(d) every runner restarted one by one",
}


def _event_meta() -> dict[str, tuple[str, str, str]]:
    meta: dict[str, tuple[str, str, str]] = {}
    for key, what in _WHAT.items():
        p = f"fleet_{key}"
        for klass in ("unmoved", "moved"):
            meta[f"{p}_{klass}_gap_p50_s"] = (f"{what}: step gap p50, {klass} partitions", "s", "")
            meta[f"{p}_{klass}_gap_p99_s"] = (f"{what}: step gap p99, {klass} partitions", "s", "")
            meta[f"{p}_{klass}_gap_max_s"] = (f"{what}: step gap max, {klass} partitions", "s", "")
        meta[f"{p}_unmoved_max_ratio"] = (f"{what}: unmoved max gap / usual gap", "ratio", "<= 2")
        meta[f"{p}_moved_max_ratio"] = (f"{what}: moved max gap / usual gap", "ratio", "")
        meta[f"{p}_gap_max_s"] = (f"{what}: longest pause of any conversation", "s", "<= 5 (d)")
        meta[f"{p}_moved_partitions"] = (f"{what}: partitions that changed runner", "partitions", "")
        meta[f"{p}_takeover_p50_s"] = (f"{what}: takeover, release -> first step (p50)", "s", "")
        meta[f"{p}_takeover_max_s"] = (f"{what}: takeover, release -> first step (max)", "s", "")
        meta[f"{p}_resume_after_assign_p99_s"] = (
            f"{what}: new assignment (or its message, if later) -> first step (p99)",
            "s",
            "<= 2 at 1k/partition",
        )
        meta[f"{p}_steps_per_s"] = (f"{what}: fleet steps/s during the event", "steps/s", "")
    return meta


FIGURES = {
    "fleet_usual_gap_p50_s": ("fleet: usual step gap p50 (quiet span)", "s", ""),
    "fleet_usual_gap_p99_s": ("fleet: usual step gap p99 (quiet span)", "s", ""),
    "fleet_steps_per_s": ("fleet: steps/s in the quiet span (3 runners)", "steps/s", ""),
    **_event_meta(),
    "fleet_session_timeout_s": ("fleet: group session timeout of the runners", "s", ""),
    **CURVE_FIGURES,
}


def run(ctx: BenchContext) -> Figures:
    """The four events, then the takeover curve."""
    size = SIZES["large" if ctx.large else "small"]
    if not ctx.settings.kafka.embedded:
        size = replace(size, live=size.live // 4, period_s=size.period_s * 4)
        ctx.notes.append(f"fleet on Apache Kafka: a quarter of the load ({APACHE_NOTE})")
    figures = measure(ctx, size)
    figures.update(curve(ctx, size.takeover_sizes, size.probes))
    return figures


def measure(ctx: BenchContext, size: FleetSize) -> Figures:
    """Run the fleet through the four events; the figures of each, and notes in `ctx.notes`."""
    settings = namespace(ctx, "fleet", PARTITIONS, size.latency_ms)
    fleet = Fleet(settings, size)
    try:
        return fleet.run(ctx)
    finally:
        fleet.stop()
        drop_namespace(settings)


class Fleet:
    """The runner children of one run, the pacer, and the events' windows."""

    def __init__(self, settings: Settings, size: FleetSize) -> None:
        self.settings = settings
        self.size = size
        self.runners: list[RunnerChild] = []
        self.dead: dict[str, float] = {}
        self.windows: list[Window] = []
        self.pacer: Pacer | None = None

    def add(self) -> RunnerChild:
        """A new runner with a data dir of its own."""
        name = f"runner-{len(self.runners)}"
        child = self.settings.model_copy(update={"data_dir": self.settings.data_dir / name})
        runner = RunnerChild(
            name, child, self.settings.data_dir / f"{name}.log", self.settings.data_dir / "ws"
        )
        self.runners.append(runner.start())
        return runner

    def owners_now(self) -> dict[int, str]:
        """Partition -> runner name, now."""
        return owners(fleet_lines(self.runners), self.dead, time.time())

    def settled(self, timeout: float = 180.0) -> float:
        """Wait until every partition has a live runner and no assignment changed for `settle_s`."""
        last: dict[int, str] | None = None
        since = time.monotonic()

        def stable() -> bool:
            nonlocal last, since
            now = self.owners_now()
            alive = {r.name for r in self.runners if r.alive}
            if now != last:
                last, since = now, time.monotonic()
            full = len(now) == PARTITIONS and set(now.values()) <= alive
            return full and time.monotonic() - since >= self.size.settle_s

        wait_for(stable, timeout, "every partition assigned and steady", self.runners, poll=0.2)
        if self.pacer is not None:
            # What queued while partitions moved is served before the span ends: a conversation's
            # pause ends in the span of the event that caused it.
            time.sleep(2 * self.size.period_s)
        return time.time()

    def run(self, ctx: BenchContext) -> Figures:
        """Start, fill, pace, then the events; the figures."""
        for _ in range(self.size.runners):
            self.add()
        self.settled()
        live = conversation_ids("live", self.size.live)
        idle = conversation_ids("idle", self.size.idle_per_partition * PARTITIONS)
        filled = time.monotonic()
        send_all(self.settings, idle + live, "hello")
        wait_for(
            lambda: _stepped(self.settings, idle + live),
            60 + len(idle) / 20,
            "first steps",
            self.runners,
            1.0,
        )
        fill_s = time.monotonic() - filled
        self.pacer = Pacer(self.settings, live, self.size.period_s)
        self.pacer.start()
        time.sleep(self.size.period_s * 2)  # every live conversation stepped under the pacer
        quiet = (time.time(), time.time() + self.size.quiet_s)
        time.sleep(self.size.quiet_s)
        steps = {
            "a_join": self._join,
            "b_leave": self._leave,
            "c_kill": self._kill,
            "d_rolling": self._rolling,
        }
        for event in self.size.events:
            steps[event]()
        time.sleep(self.size.period_s)
        self.pacer.stop()
        time.sleep(self.size.period_s)
        steps = replace(read_steps(self.settings), sent=self.pacer.sends)
        figures = self._figures(steps, set(live), quiet)
        ctx.notes.append(self._note(len(live), len(idle), fill_s))
        return figures

    def _join(self) -> None:
        t0 = time.time()
        runner = self.add()
        wait_for(
            lambda: runner.name in self.owners_now().values(), 120, "the new runner assigned", self.runners
        )
        self.windows.append(Window("a_join", t0, self.settled(), dict(self.dead)))

    def _leave(self) -> None:
        runner = self.runners[0]
        t0 = runner.signal(signal.SIGTERM)
        runner.wait_exit(120)
        self.windows.append(Window("b_leave", t0, self.settled(), dict(self.dead)))

    def _kill(self) -> None:
        runner = self.runners[1]
        t0 = runner.signal(signal.SIGKILL)
        self.dead[runner.name] = t0
        runner.wait_exit(30)
        self.windows.append(Window("c_kill", t0, self.settled(), dict(self.dead)))
        if "d_rolling" not in self.size.events:
            return
        runner.start()  # its supervisor restarts it (not measured)
        wait_for(
            lambda: runner.name in self.owners_now().values(), 120, "the killed runner back", self.runners
        )
        self.settled()

    def _rolling(self) -> None:
        t0 = time.time()
        for runner in [r for r in self.runners if r.alive]:
            runner.signal(signal.SIGTERM)
            runner.wait_exit(120)
            runner.start()
            wait_for(
                lambda runner=runner: (
                    runner.name in self.owners_now().values() and len(self.owners_now()) == PARTITIONS
                ),
                120,
                f"{runner.name} back after its restart",
                self.runners,
                0.2,
            )
        self.windows.append(Window("d_rolling", t0, self.settled(), dict(self.dead)))

    def _figures(self, steps: Steps, live: set[str], quiet: tuple[float, float]) -> Figures:
        try:
            p50, p99, rate = usual_gap(steps, live, *quiet)
        except ValueError as exc:
            raise BenchError(f"fleet: no steps in the quiet span: {exc}") from exc
        figures: Figures = {
            "fleet_usual_gap_p50_s": p50,
            "fleet_usual_gap_p99_s": p99,
            "fleet_steps_per_s": rate,
        }
        lines = fleet_lines(self.runners)
        for window in self.windows:
            found, _ = event_figures(
                f"fleet_{window.name}", lines, steps, live, window, PARTITIONS, self.size.period_s, p50
            )
            figures.update(found)
        figures["fleet_session_timeout_s"] = group_timeouts_ms(self.settings)[0] / 1000
        return figures

    def _note(self, live: int, idle: int, fill_s: float) -> str:
        conf = rebalance_config(self.settings, incremental=True)  # the runners' (`runner_config`)
        protocol = conf.get("group.protocol", "classic")
        assignor = (
            conf.get("partition.assignment.strategy") or f"{conf.get('group.remote.assignor')} (broker-side)"
        )
        spans = ", ".join(f"{w.name} {w.t1 - w.t0:.1f} s" for w in self.windows)
        return (
            f"fleet: {PARTITIONS} partitions, {self.size.runners} `convdb runner` processes (+1 joining), "
            f"{live} live conversations (one step each every {self.size.period_s:g} s, scripted model "
            f"{self.size.latency_ms:g} ms per turn), {idle} idle ones (filled in {fill_s:.0f} s); group "
            f"protocol {protocol}, assignor {assignor}; event spans (start -> assignment steady "
            f"{self.size.settle_s:g} s, then two step periods): {spans}; steps = LLMUsageEvent "
            "timestamps; moved = the partition's runner (by name) differs before and after; takeover = "
            "the old runner's release (revoked line, or SIGKILL) -> the first step its new runner "
            "served; the runners share the machine's 2 cores with the broker, the pacer and other work"
        )

    def stop(self) -> None:
        """Stop the pacer and every runner."""
        if self.pacer is not None and self.pacer.is_alive():
            self.pacer.stopping.set()
        for runner in self.runners:
            runner.stop()


def _stepped(settings: Settings, conversations: list[str]) -> bool:
    """True once every conversation has at least one step in the events topic."""
    times = read_steps(settings, committed=False).times
    return all(times.get(cid) for cid in conversations)
