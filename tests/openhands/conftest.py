"""The OpenHands venv (real openhands-sdk/agent-server 1.58.2, offline), and a running convdb around it.

The venv is built once by `tests/openhands/venv/build.sh` (the pinned lock file and the 3.11
import shim beside it; `$CONVDB_TEST_OPENHANDS_DIR/build.sh` overrides) into the user's cache and
reused; `.ci/run` builds it up front. A missing build script fails the run (these tests never
skip to green).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition

from convdb.infra.kafka import common_config
from convdb.infra.procs import free_port, spawn, stop_group, wait_for_port
from convdb.infra.reader import partition_extents, read_topic
from convdb.infra.settings import Settings
from convdb.schemas import ExternalBatch, SingleObjectCodec
from convdb.schemas.topics import INBOX
from tests.conftest import wait_until
from tests.fleet._support import RunnerProc, fleet_settings

HERE = Path(__file__).resolve().parent
BUILD = Path(os.environ.get("CONVDB_TEST_OPENHANDS_DIR") or HERE / "venv")
"""The venv's build script, lock file and shim; `CONVDB_TEST_OPENHANDS_DIR` overrides."""
KEY, TENANT = "oh-key", "tenant-oh"


def venv_dir() -> Path:
    """Where the OpenHands venv is cached (outside the repository)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "convdb" / "openhands-venv"


def build_venv(venv: Path) -> Path:
    """The venv's python, built by `venv/build.sh` when missing (one builder at a time)."""
    ready = venv / ".convdb-ready"
    if ready.exists():
        return venv / "bin" / "python"
    setup = BUILD / "build.sh"
    if not setup.is_file():
        pytest.fail(f"{setup} is missing: the OpenHands tests build their venv with it")
    venv.parent.mkdir(parents=True, exist_ok=True)
    with (venv.parent / "openhands-venv.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            subprocess.run(["rm", "-rf", str(venv)], check=True)
            started = time.monotonic()
            subprocess.run(["bash", str(setup), str(venv)], check=True, stdout=subprocess.DEVNULL)
            ready.write_text(f"built in {time.monotonic() - started:.0f}s\n")
    return venv / "bin" / "python"


@pytest.fixture(scope="session")
def openhands_python() -> Path:
    """Python of the OpenHands venv."""
    return build_venv(venv_dir())


def run_openhands(python: Path, *args: str, timeout: float = 300) -> Any:
    """Run `oh_driver.py` with the real OpenHands; its JSON answer."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")},
        "OPENHANDS_SUPPRESS_BANNER": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONPATH": str(HERE),
    }
    done = subprocess.run(
        [str(python), str(HERE / "oh_driver.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        pytest.fail(f"oh_driver {args[0]} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_same_in_sdk(again: dict[str, Any], original: dict[str, Any]) -> None:
    """Two SDK loads agree (id, status, leaf, events, view); names the first event and field that differ."""
    for key in ("id", "execution_status", "leaf", "view"):
        assert again[key] == original[key], key
    assert [e["id"] for e in again["events"]] == [e["id"] for e in original["events"]]
    for mine, theirs in zip(again["events"], original["events"], strict=True):
        differ = sorted(k for k in {*mine, *theirs} if mine.get(k) != theirs.get(k))
        assert not differ, f"event {theirs['id']} ({theirs['kind']}) differs in {differ}: {mine} != {theirs}"


@dataclass
class Convdb:
    """A running convdb: API (`convdb serve`), read-side consumers and a fleet runner."""

    settings: Settings
    base: str
    runner: RunnerProc
    tmp: Path

    def get(self, path: str, **params: Any) -> Any:
        """GET on the API as the OpenHands tenant; the JSON answer."""
        answer = httpx.get(f"{self.base}{path}", params=params, headers={"X-API-Key": KEY}, timeout=30)
        answer.raise_for_status()
        return answer.json()

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`convdb ARGS` with these settings."""
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")},
            **self.settings.to_env(),
        }
        done = subprocess.run(
            [sys.executable, "-m", "convdb", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check and done.returncode != 0:
            pytest.fail(f"convdb {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def conversation(self, cid: str, events: int, timeout: float = 90) -> dict[str, Any]:
        """The conversation's summary once the read side holds at least `events` events."""

        def ready() -> dict[str, Any] | None:
            try:
                found = self.get(f"/conversations/{cid}")
            except httpx.HTTPStatusError:
                return None
            stats = found.get("stats") or {}
            return found if stats.get("events", 0) >= events and found["events"] >= events else None

        return wait_until(
            ready, timeout, f"conversation {cid} with {events} events in the read side", logs=self.runner.logs
        )  # type: ignore[no-any-return]

    def stopped(self, cid: str, timeout: float = 120) -> dict[str, Any]:
        """The conversation's summary once the read side shows it in a stop state."""

        def ready() -> dict[str, Any] | None:
            try:
                found = self.get(f"/conversations/{cid}")
            except httpx.HTTPStatusError:
                return None
            return found if found["execution_status"] in ("finished", "error", "stuck", "paused") else None

        return wait_until(ready, timeout, f"conversation {cid} to stop", logs=self.runner.logs)  # type: ignore[no-any-return]

    def runner_caught_up(self, timeout: float = 90) -> None:
        """Wait until the runner committed every inbox record written so far."""
        topic = INBOX.name(self.settings.namespace)
        ends = {p: high for p, (_, high) in partition_extents(self.settings, topic).items()}
        consumer = Consumer({**common_config(self.settings), "group.id": self.settings.group("runner")})
        try:

            def done() -> bool:
                committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=10)
                return all(tp.offset >= ends[tp.partition] for tp in committed if ends[tp.partition] > 0)

            wait_until(done, timeout, "the runner to commit every inbox record", logs=self.runner.logs)
        finally:
            consumer.close()

    def restart_runner(self) -> None:
        """Kill the runner (SIGKILL) and start a new one (it restores from the log)."""
        self.runner.signal(9)
        self.runner.stop()
        self.runner = _runner(self.settings, self.tmp)


def inbox_batches(settings: Settings, conversation_id: str) -> list[ExternalBatch]:
    """The OpenHands records the inbox topic holds for one conversation, in order."""
    codec = SingleObjectCodec()
    return [
        codec.decode(msg.value(), expect=(ExternalBatch,))
        for msg in read_topic(settings, INBOX.name(settings.namespace))
        if msg.key() == conversation_id.encode()
    ]


def _runner(settings: Settings, tmp: Path) -> RunnerProc:
    log = tmp / f"runner-{time.monotonic_ns()}.log"
    return RunnerProc(settings, tmp / "runner-workspace", None, log)


@pytest.fixture
def convdb(settings: Settings, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Convdb]:
    """API, consumers and a runner over this test's namespace (keys: oh-key -> tenant-oh).

    A test marked `openhands_lost_responses(N)` gets an API that answers 503 to its first N webhook
    posts after storing them.
    """
    api = settings.api.model_copy(update={"keys": {KEY: TENANT, "other-key": "tenant-other"}})
    marker = request.node.get_closest_marker("openhands_lost_responses")
    openhands = settings.openhands.model_copy(
        update={"fault_lost_responses": marker.args[0] if marker else 0}
    )
    # Snapshots every 5 events: restores go through them (a run elsewhere refolds from its first event).
    settings = fleet_settings(settings, tmp_path / "data", snapshot_every=5).model_copy(
        update={"api": api, "openhands": openhands, "store_url": f"sqlite:///{tmp_path / 'store.db'}"}
    )
    port = free_port()
    env = settings.to_env()
    serve = spawn([sys.executable, "-m", "convdb", "serve", "--port", str(port)], tmp_path / "serve.log", env)
    consume = spawn([sys.executable, "-m", "convdb", "consume", "all"], tmp_path / "consume.log", env)
    running = Convdb(settings, f"http://127.0.0.1:{port}", _runner(settings, tmp_path), tmp_path)
    try:
        wait_for_port(serve, port, 60, "convdb serve", tmp_path / "serve.log")
        yield running
    finally:
        stop_group(serve.pid)
        stop_group(consume.pid)
        running.runner.stop()
