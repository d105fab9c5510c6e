"""One fleet runner process: its context (runtime, fault hooks, snapshot store) and its serve loop.

`convdb runner` (the CLI) builds the settings and calls these; so do `convdb run` and the demo.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from convdb.infra.ops import start_ops
from convdb.infra.procs import on_stop_signal
from convdb.infra.settings import Settings
from convdb.producers.fleet.owner import FleetContext
from convdb.producers.fleet.runner import FleetRunner, StopPoints
from convdb.producers.fleet.store import SnapshotStore
from convdb.producers.runtime import build_runtime


def build_context(
    settings: Settings,
    workspace: Path,
    tracker_url: str | None,
    model: str | None,
    *,
    store: Path | None = None,
    agent: str | None = None,
    graph: str | None = None,
) -> FleetContext:
    """The runtime, fault hooks and local snapshot store of one runner.

    `store`: the snapshot store's file (default: one per namespace under the data dir). A broker
    that does not outlive the command (the embedded one) needs a store of its own.
    `agent`: the default agent (a `convdb.agents` name or `module:attr`; None: the built-in one);
    conversations whose first message names another agent run that one.
    `graph`: the default LangGraph graph instead (a `convdb.graphs` name or `module:attr`).

    Raises:
        UnknownAgentError, AgentLoadError: the default agent cannot be loaded.
    """
    crash = StopPoints(settings.crash_at, settings.crash_tool, settings.crash_signal)
    runtime = build_runtime(
        settings,
        workspace=workspace,
        tracker_url=tracker_url,
        model=model,
        crash=crash,
        agent=agent,
        graph=graph,
    )
    path = store or settings.data_dir / "fleet" / f"{settings.namespace}.sqlite"
    return FleetContext(settings, runtime, SnapshotStore(path))


def serve(ctx: FleetContext, idle_exit: float = 0.0) -> int:
    """Serve until SIGTERM/SIGINT, or `idle_exit` seconds without work (an assignment, a takeover,
    an inbox record) once partitions were first assigned."""
    stopping = threading.Event()
    on_stop_signal(stopping.set, "runner", ctx.settings.ops.stop_grace_s)

    def stop(runner: FleetRunner) -> bool:
        if stopping.is_set():
            return True
        last = runner.last_activity
        return bool(idle_exit and last is not None and time.monotonic() - last > idle_exit)

    runner = FleetRunner(ctx)
    server = start_ops(ctx.settings.ops, "runner", runner.registry, runner.health.report)
    runner.emit("started", group=ctx.settings.group("runner"))
    try:
        runner.serve(stop)
    finally:
        if server is not None:
            server.stop()
    runner.emit("stopped", handled=runner.handled)
    return 0
