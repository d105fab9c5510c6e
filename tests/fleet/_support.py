"""Helpers for fleet tests: runner processes whose JSON status lines are collected as they come."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from convdb.infra.settings import Settings
from tests.producers._support import direct


def fleet_settings(settings: Settings, data_dir: Path, **runtime: Any) -> Settings:
    """Scripted model without litellm, this data dir, and runtime overrides (e.g. snapshot_every)."""
    return direct(settings, **runtime).model_copy(update={"data_dir": data_dir})


def _die_with_parent() -> None:
    # SIGKILL, not SIGTERM: a SIGSTOPped runner would never act on a SIGTERM.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


class RunnerProc:
    """`python -m convdb runner` as a child process; stdout JSON lines are parsed in a thread.

    Its stderr goes to `log`, and its status lines, as they are parsed, to `status_log` beside it:
    a test that waits on the runner shows both when the wait times out (`logs`).
    """

    def __init__(
        self, settings: Settings, workspace: Path, tracker: str | None, log: Path, **env: str
    ) -> None:
        argv = [sys.executable, "-m", "convdb", "runner", "--workspace", str(workspace)]
        if tracker:
            argv += ["--tracker-url", tracker]
        base = {k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")}
        self.log = log
        self.status_log = log.with_name(f"{log.stem}.status.jsonl")
        self._stderr = log.open("w")
        self.proc = subprocess.Popen(
            argv,
            env={**base, **settings.to_env(), **env},
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self.lines: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.status_log.open("w") as status:
            for line in self.proc.stdout:
                if line.startswith("{"):
                    self.lines.append(json.loads(line))
                    status.write(line)
                    status.flush()

    @property
    def logs(self) -> tuple[Path, Path]:
        """Its stderr log and its status lines (for a failed wait's report)."""
        return self.log, self.status_log

    @property
    def pid(self) -> int:
        """Process id."""
        return self.proc.pid

    def events(self, kind: str) -> list[dict[str, Any]]:
        """Status lines of one kind, in order."""
        return [line for line in list(self.lines) if line["event"] == kind]

    def owned(self) -> set[int]:
        """Partitions owned according to the latest assigned/revoked/lost/fenced lines."""
        owned: set[int] = set()
        for line in list(self.lines):
            if line["event"] == "assigned":
                owned = set(line["partitions"])
            elif line["event"] in ("revoked", "lost"):
                owned -= set(line["partitions"])
            elif line["event"] == "fenced":
                owned.discard(line["partition"])
            elif line["event"] == "restored":  # rebuilt after a failed write, or reclaimed
                owned.add(line["partition"])
        return owned

    def stderr(self) -> str:
        """What the process logged so far."""
        self._stderr.flush()
        return self.log.read_text()

    def stopped(self) -> bool:
        """True when the process is stopped by a signal (state T in /proc)."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except FileNotFoundError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")

    def signal(self, signum: int) -> None:
        """Send a signal to the process."""
        os.kill(self.pid, signum)

    def stop(self) -> None:
        """SIGCONT (if stopped), SIGTERM, then SIGKILL after a grace period; always reaped."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        self._stderr.close()


def logs_of(runners: list[RunnerProc]) -> list[Path]:
    """The logs of every runner (for `wait_until`)."""
    return [path for runner in runners for path in runner.logs]
