"""LangGraph's own graph tests (pregel, time travel, forks, interrupts, subgraphs, DeltaChannel,
every durability mode) with convdb's saver as one more checkpointer fixture value.

The tests come from the sdist of the installed langgraph (`tests/langgraph/suite.py`); each run
is a subprocess talking to this module's broker. The default run takes the time-travel tests
(forks and `update_state` on old checkpoints: the ones channel versions reused across branches
break) on one broker; the whole suite (648 tests, several minutes per broker) runs under -m slow.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from convdb.infra.settings import Settings
from tests.langgraph.suite import add_convdb_fixture, fetch_tests, run_suite

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]


def run(settings: Settings, tmp_path: Path, files: list[str]) -> None:
    root = fetch_tests(tmp_path)
    add_convdb_fixture(root)
    fields = {
        "bootstrap_servers": settings.bootstrap_servers,
        "kafka": {"embedded": settings.kafka.embedded},
        # One partition per saver: each of LangGraph's tests takes a fresh saver, and what they test
        # (the saver's reads and writes) is the same on any partition (the conformance test uses 4).
        "partitions": 1,
    }
    started = time.monotonic()
    done = run_suite(root, fields, files, timeout=3000)
    print(f"LangGraph's tests on convdb: {done.summary} ({time.monotonic() - started:.0f} s)")
    print("\n".join(done.failures))
    assert done.returncode == 0, done.output
    assert " passed" in done.summary and "failed" not in done.summary and "error" not in done.summary


@pytest.mark.slow_on("apache")
def test_langgraphs_time_travel_tests_pass_on_the_convdb_saver(settings: Settings, tmp_path: Path) -> None:
    run(settings, tmp_path, ["tests/test_time_travel.py"])


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_langgraphs_own_graph_tests_pass_on_the_convdb_saver(settings: Settings, tmp_path: Path) -> None:
    run(settings, tmp_path, [])
