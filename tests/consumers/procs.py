"""Consumer services as real subprocesses (`python -m convdb consume ...`) for fault tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from convdb.infra.procs import free_port, spawn, stop_group, tail
from convdb.infra.settings import Settings
from tests.conftest import wait_until


class ConsumerProcess:
    """One `convdb consume` child; dies with the test (PDEATHSIG) and is stopped in `finally`."""

    def __init__(self, settings: Settings, names: list[str], log: Path, batch_size: int = 2000) -> None:
        self.settings = settings
        self.names = names
        self.log = log
        self.batch_size = batch_size
        self.metrics_port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ConsumerProcess:
        """Start the child with the settings in its environment."""
        self.metrics_port = free_port()
        argv = [
            sys.executable,
            "-m",
            "convdb",
            "-v",
            "consume",
            *self.names,
            "--metrics-port",
            str(self.metrics_port),
            "--batch-size",
            str(self.batch_size),
        ]
        env = {**self.settings.to_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1"}
        self.proc = spawn(argv, self.log, env)
        return self

    @property
    def pid(self) -> int:
        """The child's pid."""
        if self.proc is None:
            raise RuntimeError("not started")
        return self.proc.pid

    def alive(self) -> bool:
        """True while the child runs."""
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL (a crash: no batch finished, nothing flushed)."""
        if self.alive():
            os.killpg(self.pid, signal.SIGKILL)
            self.proc.wait(10)  # type: ignore[union-attr]

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the graceful stop (finish the batch, commit, leave the group)."""
        if self.proc is None:
            return 0
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                stop_group(self.pid, 1.0)
        return self.proc.wait(5)

    def stop(self) -> None:
        """Make sure the child is gone (fixture cleanup)."""
        if self.proc is not None and self.alive():
            stop_group(self.pid, 5.0)

    def metrics(self) -> str:
        """The child's /metrics text, or '' while it is not serving."""
        try:
            return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2.0).text
        except httpx.HTTPError:
            return ""

    def healthz(self) -> int:
        """HTTP status of /healthz (0 when unreachable)."""
        try:
            return httpx.get(f"http://127.0.0.1:{self.metrics_port}/healthz", timeout=2.0).status_code
        except httpx.HTTPError:
            return 0

    def log_tail(self, lines: int = 30) -> str:
        """The end of the child's log, for failure messages."""
        return tail(self.log, lines)


def metric_value(text: str, name: str) -> float:
    """Sum of a metric's samples in Prometheus text (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_progress(proc: ConsumerProcess, minimum: float, timeout: float = 60.0) -> float:
    """Wait until the child reports at least `minimum` applied events in /metrics; returns that count."""

    def applied() -> float:
        if not proc.alive():
            raise AssertionError(f"consumer died:\n{proc.log_tail()}")
        value = metric_value(proc.metrics(), "convdb_consumer_events_total")
        return value if value >= minimum else 0.0

    return wait_until(applied, timeout, f"progress to {minimum} events", logs=[proc.log])


def wait_assigned(proc: ConsumerProcess, timeout: float = 60.0) -> None:
    """Wait until the child's log says it was assigned partitions (a group member, rebalanced in)."""

    def assigned() -> bool:
        if not proc.alive():
            raise AssertionError(f"consumer died:\n{proc.log_tail()}")
        return " assigned [(" in proc.log_tail(200)

    wait_until(assigned, timeout, "an assignment", logs=[proc.log])
