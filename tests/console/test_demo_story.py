"""`convdb demo` tells its story and `--keep` leaves the stack (and its console) running until Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from convdb.infra.settings import Settings
from tests.conftest import wait_until
from tests.console.conftest import csrf_of

pytestmark = pytest.mark.kafka


def _lines_until(proc: subprocess.Popen[str], marker: str, timeout: float) -> tuple[str, list[str]]:
    """Everything the process printed until a line containing `marker` (fails on timeout or exit),
    and the list its later lines go on arriving in: the pipe is read to the end, so the demo never
    blocks writing to it (librdkafka logs to the same pipe)."""
    seen: list[str] = []
    done = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if marker in line:
                done.set()
        done.set()

    threading.Thread(target=read, daemon=True).start()
    if not done.wait(timeout) or not any(marker in line for line in seen):
        proc.kill()
        pytest.fail(f"`convdb demo --keep` did not print {marker!r} in {timeout}s:\n{''.join(seen)[-4000:]}")
    return "".join(seen), seen


def test_demo_story_then_keep_until_ctrl_c(settings: Settings, tmp_path: Path) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")}, **settings.to_env()}
    argv = [sys.executable, "-m", "convdb", "demo", "--keep", "--conversations", "2"]
    proc = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        # Ctrl-C as a terminal delivers it: a test run started in the background of a shell without
        # job control ignores SIGINT, and Python then never turns it into KeyboardInterrupt.
        preexec_fn=_default_sigint,
    )
    try:
        story, printed = _lines_until(proc, "Press Ctrl-C", 300)
        # The story streams as it happens: each conversation's line as it stops, before the story.
        stopped = [i for i, line in enumerate(printed) if re.search(r"conversation demo-\w+ finished", line)]
        header = next(i for i, line in enumerate(printed) if "2 agent conversations" in line)
        act2 = next(i for i, line in enumerate(printed) if "act 2: runner A was killed" in line)
        assert len(stopped) == 2 and max(stopped) < act2 < header, "".join(printed)
        assert printed[0].split()[1:3] == ["convdb", "demo:"], printed[0]
        assert "2 agent conversations" in story and story.count("Summarise notes-") == 2
        assert "create_issue" in story and "the call answered (receipt trk-" in story
        assert "was SIGKILLed after the call" in story
        assert "asked the tracker by the operation id instead of calling again: it had happened" in story
        assert (
            "1 issue created for this operation (its idempotency key), 1 change made by the tracker" in story
        )
        assert "4. One agent hands three tasks to sub-agents" in story  # the fan-out act, its tree:
        assert "started 3 child conversations on 3 partitions and read their 3 results back" in story
        assert story.count("├─") == 2 and story.count("└─") == 1 and "Noted: Check the release notes" in story
        url = re.search(r"Console: (http://[\d.:]+)/", story)
        assert url, story
        with httpx.Client(base_url=url.group(1), timeout=10) as browser:
            token = csrf_of(browser.get("/console/login").text)
            assert (
                browser.post("/console/login", data={"csrf": token, "api_key": "demo-key"}).status_code == 303
            )
            wait_until(
                lambda: any("Decide it in the console" in line for line in printed), 180, "the queue item"
            )
            decide = next(line for line in printed if "Decide it in the console" in line)
            conversation_id = re.search(r"the conversation (demo-decide-[0-9a-f]+) then finishes", decide)
            assert conversation_id, decide
            listed = browser.get("/").text
            # two tasks, the crash act, the fan-out's parent and its three children, the decision
            assert listed.count("data-conversation-id=") == 8
            crashed = re.search(r'data-conversation-id="(demo-crash-[0-9a-f]+)"', listed)
            assert crashed, listed
            page = browser.get(f"/console/conversations/{crashed.group(1)}").text
            assert 'class="marker takeover"' in page  # the crash act, where it happened in the timeline
            assert "stopped during the call" in page and "confirmed it by lookup" in page
            assert "Confirmed by lookup (the provider was asked whether it happened)" in page
            queue = browser.get("/console/queue").text
            operation = re.search(r'data-operation-id="([^"]+)"', queue)
            assert operation and operation.group(1).startswith(conversation_id.group(1)), queue
            assert "the runner stopped during the provider call" in queue
            decided = browser.post(
                "/console/operations/resolve",
                data={"csrf": csrf_of(queue), "operation_id": operation.group(1), "decision": "confirmed"},
            )
            assert decided.status_code in (200, 303), decided.text
            api = {"X-API-Key": "demo-key"}

            def finished() -> bool:
                found = browser.get(f"/conversations/{conversation_id.group(1)}", headers=api).json()
                return bool(found["execution_status"] == "finished")

            wait_until(finished, 90, "the decided conversation to finish")
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(90)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the demo did not stop within 90 s of Ctrl-C; it printed:\n{''.join(printed[-60:])}")
        assert code == 0, "".join(printed[-60:])
        time.sleep(0.5)  # the reader thread takes the last lines from the pipe
        # Nothing raw from librdkafka, before or after the shutdown, and the last line is true.
        assert not [line for line in printed if "%3|" in line or "%4|" in line], "".join(printed[-60:])
        assert printed[-1].startswith("The demo has stopped"), printed[-5:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    wait_until(lambda: not _port_open(url.group(1)), 10, "the console to stop answering after Ctrl-C")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _port_open(base: str) -> bool:
    try:
        httpx.get(base + "/console/login", timeout=1)
    except httpx.TransportError:
        return False
    return True
