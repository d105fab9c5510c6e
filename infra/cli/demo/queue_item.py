"""`convdb demo --keep`: leave one decision in the human queue for the user to make in the console.

An irreversible tool with no lookup (`notify`: the tracker cannot be asked afterwards whether a
notification went out) is called by a runner that is SIGKILLed right after it recorded the call as
started. The runner that takes over cannot tell whether it happened and must not call it again, so
the operation is `unknown` and waits for a human: "it happened", "it did not happen (retry
allowed)" or "abandon", in the console's human queue. The conversation finishes once decided.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from subprocess import Popen, TimeoutExpired
from typing import Any

import httpx

from convdb.infra.cli.demo.read import runner_env
from convdb.infra.errors import InfraError
from convdb.infra.procs import spawn, tail
from convdb.infra.settings import Settings

TASK = "\n".join(
    [
        "Tell ops that the release is out.",
        '!notify {"to": "ops", "text": "Release 1.0 is out."}',
    ]
)
"""One irreversible call without a lookup: after a crash nobody can tell whether it happened."""


def leave_one(
    act: Any, settings: Settings, api: httpx.Client, console_url: str, *, quiet: bool, timeout: float = 180
) -> str:
    """Play it with the crash act's runners stopped first (a runner that owns the partitions would
    run the task without crashing); the runner that takes over keeps running, joined to `act`'s
    runners so that the demo stops it. Returns the conversation id; prints where to decide it.

    Raises:
        InfraError: the runner was not killed, or the conversation did not come to wait for a human.
    """
    act.stop()
    conversation_id = f"demo-decide-{uuid.uuid4().hex[:8]}"
    api.post(f"/conversations/{conversation_id}/messages", json={"content": TASK}).raise_for_status()
    run_dir: Path = act.run_dir
    killed = _runner(
        act, settings, "runner-c", CONVDB_CRASH_AT="after_effect_started", CONVDB_CRASH_TOOL="notify"
    )
    try:
        killed.wait(timeout)
    except TimeoutExpired as exc:
        raise InfraError(
            f"runner C was not killed during the notify call: {tail(run_dir / 'runner-c.log')}"
        ) from exc
    _runner(act, settings, "runner-d")
    deadline = time.monotonic() + timeout
    while _status(api, conversation_id) != "waiting_for_human":
        if time.monotonic() > deadline:
            raise InfraError(
                f"{conversation_id} is not waiting for a human: {tail(run_dir / 'runner-d.log')}"
            )
        time.sleep(0.3)
    if not quiet:
        print(
            f"\nOne decision is yours: runner C (pid {killed.pid}) was SIGKILLed during an irreversible "
            f"notify call that cannot be looked up, so nobody knows whether ops was told.\n"
            f"Decide it in the console: {console_url}/console/queue (API key demo-key); "
            f"the conversation {conversation_id} then finishes.",
            flush=True,
        )
    return conversation_id


def _runner(act: Any, settings: Settings, name: str, **env: str) -> Popen[bytes]:
    argv = [sys.executable, "-m", "convdb.infra.cli.main", "runner", "--workspace", str(act.workspace)]
    argv += ["--tracker-url", act.tracker_url]
    proc = spawn(argv, act.run_dir / f"{name}.log", {**runner_env(settings, act.run_dir), **env})
    act.runners.append(proc)
    return proc


def _status(api: httpx.Client, conversation_id: str) -> str | None:
    answer = api.get(f"/conversations/{conversation_id}")
    return answer.json()["execution_status"] if answer.status_code == 200 else None
