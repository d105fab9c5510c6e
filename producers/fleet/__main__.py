"""`python -m producers.fleet`: one fleet runner process until SIGTERM (or idle).

Settings come from `CONVDB_*`. Prints JSON status lines (assigned, takeover, fenced, ...) on stdout.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from pathlib import Path

from infra.ops import start_ops
from infra.procs import on_stop_signal
from infra.settings import Settings
from producers.fleet.owner import FleetContext
from producers.fleet.runner import FleetRunner, StopPoints
from producers.fleet.store import SnapshotStore
from producers.runtime import build_runtime


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line arguments."""
    p = argparse.ArgumentParser(prog="python -m producers.fleet")
    p.add_argument("--workspace", type=Path, default=Path("workspace"))
    p.add_argument("--tracker-url", help="issue-tracker provider base URL")
    p.add_argument("--model", help="litellm model (default: settings)")
    p.add_argument(
        "--idle-exit",
        type=float,
        default=0.0,
        help="exit after this many idle seconds, counted from the first assignment (0: never)",
    )
    return p.parse_args(argv)


def build_context(
    settings: Settings,
    workspace: Path,
    tracker_url: str | None,
    model: str | None,
    *,
    store: Path | None = None,
) -> FleetContext:
    """The runtime, fault hooks and local snapshot store of one runner.

    `store`: the snapshot store's file (default: one per namespace under the data dir). A broker
    that does not outlive the command (the embedded one) needs a store of its own.
    """
    crash = StopPoints(settings.crash_at, settings.crash_tool, settings.crash_signal)
    runtime = build_runtime(settings, workspace=workspace, tracker_url=tracker_url, model=model, crash=crash)
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


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = Settings()
    return serve(build_context(settings, args.workspace, args.tracker_url, args.model), args.idle_exit)


if __name__ == "__main__":
    sys.exit(main())
