"""The duplicate charge, side by side: a node SIGKILLed after its provider call, then resumed.

LangGraph's SqliteSaver hears nothing until the node returns, so the resumed graph charges the
card again. With convdb's saver and the charge under `@effect`, the ledger says the call was
started: the provider's lookup finds the charge and the resumed node gets the recorded result.
Each kill point is covered; without a lookup the irreversible charge goes to a human (LangGraph's
`interrupt()`) and the graph finishes after the decision.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from convdb.infra.settings import Settings
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]


def child(kind: str, action: str, work: Path, store: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.langgraph.crash_child", kind, action, str(work), store],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_killed(kind: str, work: Path, store: str, crash_at: str, **env: str) -> None:
    """A first run, SIGKILLed by this test where it paused."""
    proc = child(kind, "run", work, store, CRASH_AT=crash_at, **env)
    try:
        wait_until(lambda: (work / "paused").exists() or proc.poll() is not None, timeout=60)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def finish(kind: str, action: str, work: Path, store: str, **env: str) -> dict[str, Any]:
    proc = child(kind, action, work, store, **env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.splitlines()[-1])  # type: ignore[no-any-return]


def charges(work: Path) -> list[str]:
    return (work / "provider.log").read_text().splitlines()


def store_of(settings: Settings) -> str:
    return json.dumps(
        {
            "namespace": settings.namespace,
            "bootstrap_servers": settings.bootstrap_servers,
            "kafka": {"embedded": settings.kafka.embedded},
        }
    )


def test_sqlite_saver_charges_twice(tmp_path: Path) -> None:
    store = str(tmp_path / "checkpoints.sqlite")
    run_killed("sqlite", tmp_path, store, "after_call")
    assert len(charges(tmp_path)) == 1
    result = finish("sqlite", "resume", tmp_path, store)
    assert result["log"][-1] == "finish"
    assert len(charges(tmp_path)) == 2  # the hole: the resumed node charged the card again


@pytest.mark.kafka
@pytest.mark.brokers
@pytest.mark.parametrize(
    "crash_at",
    [
        # The demo's kill point runs by default; the two others (each about 10 s per broker of
        # process start-ups) under -m slow.
        pytest.param("before_call", marks=pytest.mark.slow),
        "after_call",
        pytest.param("after_confirmed", marks=pytest.mark.slow),
    ],
)
def test_convdb_charges_once_whatever_the_kill_point(
    settings: Settings, tmp_path: Path, crash_at: str
) -> None:
    store = store_of(settings)
    run_killed("convdb", tmp_path, store, crash_at)
    result = finish("convdb", "resume", tmp_path, store)
    assert result["interrupts"] == []
    assert [e for e in result["log"] if not e.startswith("slow")] == ["plan", "fast", "finish"]
    lines = charges(tmp_path)
    assert len(lines) == 1, lines
    assert result["log"].count("slow:ch-1") == 1


@pytest.mark.kafka
@pytest.mark.brokers
@pytest.mark.slow_on("apache")
def test_an_irreversible_charge_without_lookup_goes_to_a_human_then_finishes(
    settings: Settings, tmp_path: Path
) -> None:
    store = store_of(settings)
    run_killed("convdb", tmp_path, store, "after_call", CRASH_NO_LOOKUP="1")
    asked = finish("convdb", "resume", tmp_path, store, CRASH_NO_LOOKUP="1")
    assert len(asked["interrupts"]) == 1
    question = asked["interrupts"][0]
    assert question["kind"] == "effect_unknown" and question["tool_name"] == "charge_card"
    assert question["operation_id"].startswith("order-1/")
    assert len(charges(tmp_path)) == 1  # nobody called the provider again

    decision = json.dumps(
        {"decision": "confirmed", "result": {"charge_id": "ch-1", "amount": 42}, "by": "ops"}
    )
    done = finish("convdb", "decide", tmp_path, store, CRASH_NO_LOOKUP="1", CRASH_DECISION=decision)
    assert done["interrupts"] == [] and done["log"][-1] == "finish" and "slow:ch-1" in done["log"]
    assert len(charges(tmp_path)) == 1


@pytest.mark.kafka
@pytest.mark.brokers
@pytest.mark.slow_on("apache")
def test_a_zombie_that_wakes_after_the_takeover_is_fenced_before_it_reaches_the_provider(
    settings: Settings, tmp_path: Path
) -> None:
    """A process frozen (SIGSTOP) in its `slow` step; another resumes the thread and charges; the
    frozen one wakes and goes on with its step: its next write through the partition's writer is
    refused (FencedError), and it never calls the provider."""
    store = store_of(settings)
    zombie = child("convdb", "run", tmp_path, store, CRASH_AT="before_effect", CRASH_WAKE="1")
    try:
        wait_until(lambda: (tmp_path / "paused").exists() or zombie.poll() is not None, timeout=60)
        assert zombie.poll() is None, zombie.communicate()
        zombie.send_signal(signal.SIGSTOP)

        result = finish("convdb", "resume", tmp_path, store)  # the new owner takes the partition
        assert result["log"][-1] == "finish" and "slow:ch-1" in result["log"]
        assert len(charges(tmp_path)) == 1

        (tmp_path / "wake").write_text("")
        zombie.send_signal(signal.SIGCONT)
        _, err = zombie.communicate(timeout=60)
    finally:
        if zombie.poll() is None:
            zombie.kill()
            zombie.communicate()
    assert zombie.returncode != 0 and "FencedError" in err, err
    assert len(charges(tmp_path)) == 1  # the zombie never reached the provider
