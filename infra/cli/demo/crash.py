"""The demo's crash act and its console: a runner SIGKILLed right after a provider call, another
runner resuming the conversation; `convdb serve` for the user to watch it all."""

from __future__ import annotations

import faulthandler
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from subprocess import Popen, TimeoutExpired
from typing import Any

import httpx

from convdb.infra.cli.demo import delegation, queue_item
from convdb.infra.cli.demo.progress import Progress
from convdb.infra.cli.demo.read import runner_env
from convdb.infra.cli.demo.story import CrashStory, read_story, tell, tell_keep
from convdb.infra.errors import InfraError
from convdb.infra.procs import (
    free_port,
    port_open,
    spawn,
    stop_group,
    tail,
    terminate_children,
    wait_for_port,
)
from convdb.infra.settings import Settings

CRASH_TASK = "\n".join(
    [
        "Open the release issue for version 1.0.",
        '!create_issue {"title": "Release 1.0", "body": "Everything in the reports is shipped."}',
    ]
)
"""The crash act's task: one keyed side effect (the tracker honours idempotency keys and can be
asked afterwards whether an operation happened)."""
DEMO_KEY = "demo-key"


@contextmanager
def console_server(settings: Settings, log_dir: Path) -> Iterator[str]:
    """`convdb serve` (API and console) as a child process; yields its base URL."""
    port = settings.api.port if not port_open(settings.api.port) else free_port()
    log = log_dir / "serve.log"
    argv = [sys.executable, "-m", "convdb", "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = spawn(argv, log, settings.to_env())
    try:
        wait_for_port(proc, port, 60, "convdb serve", log)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_group(proc.pid, timeout=15)
        proc.wait()


class CrashAct:
    """Runner A calls the tracker and is SIGKILLed before it records the answer; runner B resumes."""

    def __init__(self, settings: Settings, tracker_url: str, workspace: Path, run_dir: Path) -> None:
        self.settings, self.tracker_url, self.workspace, self.run_dir = (
            settings,
            tracker_url,
            workspace,
            run_dir,
        )
        self.runners: list[Popen[bytes]] = []

    def _runner(self, name: str, **env: str) -> Popen[bytes]:
        argv = [
            sys.executable,
            "-m",
            "convdb.infra.cli.main",
            "runner",
            "--workspace",
            str(self.workspace),
            "--tracker-url",
            self.tracker_url,
        ]
        proc = spawn(argv, self.run_dir / f"{name}.log", {**runner_env(self.settings, self.run_dir), **env})
        self.runners.append(proc)
        return proc

    def run(self, api: httpx.Client, provider: Any, timeout: float = 180) -> CrashStory:
        """Play the act; raises InfraError (with the runners' logs) if it does not end as it must."""
        started = time.monotonic()
        before = provider.get("/stats")
        conversation_id = f"demo-crash-{uuid.uuid4().hex[:8]}"
        posted = api.post(f"/conversations/{conversation_id}/messages", json={"content": CRASH_TASK})
        posted.raise_for_status()
        killed = self._runner(
            "runner-a", CONVDB_CRASH_AT="after_provider_call", CONVDB_CRASH_TOOL="create_issue"
        )
        try:
            killed.wait(timeout)
        except TimeoutExpired as exc:
            raise InfraError(
                f"runner A was not killed at the crash point: {tail(self.run_dir / 'runner-a.log')}"
            ) from exc
        resumed = self._runner("runner-b")
        deadline = time.monotonic() + timeout
        while self._status(api, conversation_id) != "finished":
            if time.monotonic() > deadline:
                raise InfraError(
                    f"{conversation_id} did not finish after the crash: {tail(self.run_dir / 'runner-b.log')}"
                )
            time.sleep(0.3)
        (op,) = api.get("/operations", params={"conversation_id": conversation_id}).json()["operations"]
        ledger = api.get(f"/operations/{op['operation_id']}").json()["ledger"]
        view = api.get(f"/conversations/{conversation_id}/view").json()["events"]
        observation = next(e for e in view if e["kind"] == "observation")
        after = provider.get("/stats")
        return CrashStory(
            conversation_id,
            killed.pid,
            resumed.pid,
            op["operation_id"],
            "finished",
            next((r["by"] for r in ledger if r["kind"] == "effect_confirmed"), "?"),
            op["evidence"]["provider_receipt"],
            bool(observation.get("backfilled")),
            after["by_key"].get(op["operation_id"], 0),
            after["mutations"] - before["mutations"],
            time.monotonic() - started,
        )

    @staticmethod
    def _status(api: httpx.Client, conversation_id: str) -> str | None:
        answer = api.get(f"/conversations/{conversation_id}")
        return answer.json()["execution_status"] if answer.status_code == 200 else None

    def stop(self) -> None:
        """Stop the runners still running."""
        for proc in self.runners:
            if proc.poll() is None:
                stop_group(proc.pid, timeout=15)
            proc.wait()


def announce(console_url: str, progress: Progress) -> None:
    """Tell a new user where to watch, before the conversations run (nothing with `--json`)."""
    progress.line(
        f"Console: {console_url}/  (API key demo-key): open it now to watch the conversations live; "
        "it runs as long as the demo does"
    )


def finish(
    parts: Any,
    settings: Settings,
    run_dir: Path,
    provider: Any,
    console_url: str,
    *,
    keep: bool,
    as_json: bool,
    summarize: Callable[[], dict[str, Any]],
    progress: Progress | None = None,
) -> None:
    """Play the crash act, then print the summary (`--json`) or the story; with `keep`, wait for Ctrl-C."""
    from rich.console import Console

    progress = progress or Progress(enabled=False)
    workspace = run_dir / "crash-workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    act = CrashAct(settings, provider.url, workspace, run_dir)
    try:
        with httpx.Client(base_url=console_url, headers={"X-API-Key": DEMO_KEY}, timeout=30) as api:
            with progress.waiting("act 2: a runner is killed in the middle of a side effect"):
                crash = act.run(api, provider)
            progress.line(
                f"act 2: runner A was killed after calling the tracker; runner B resumed "
                f"{crash.conversation_id}: {crash.status}, {crash.provider_creations} issue created"
            )
            parts.crash_resume = crash.as_json()
            # Runner B still serves every partition: the fan-out act runs on it.
            with progress.waiting("act 3: an agent hands three tasks to sub-agents"):
                fan_out = delegation.play(api, settings.partitions)
            progress.line(
                f"act 3: {fan_out.parent} delegated to {len(fan_out.children)} child conversations and "
                f"folded their {fan_out.results_in_observation} results back"
            )
            parts.delegation = fan_out.as_json()
            summary = summarize()
            if as_json:
                print(json.dumps(summary), flush=True)
            else:
                stories = [read_story(api, c) for c in parts.conversation_ids]
                console = Console(highlight=False, soft_wrap=True)
                tell(console, stories, crash, summary)
                delegation.tell(console, fan_out, console_url)
                if keep:  # last, after every act
                    tell_keep(console, console_url)
            if keep:  # one decision left in the human queue for the user (see `queue_item`)
                queue_item.leave_one(act, settings, api, console_url, quiet=as_json)
        if keep:
            _wait_for_ctrl_c()
    finally:
        act.stop()


def _wait_for_ctrl_c() -> None:
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("\nStopping the demo stack.", flush=True)
        terminate_children()  # all at once; each is then waited for in turn
        # A stop that hangs says where: every thread's stack on stderr after a minute.
        faulthandler.dump_traceback_later(60, exit=False)
