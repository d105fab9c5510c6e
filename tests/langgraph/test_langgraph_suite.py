"""LangGraph's own graph tests (pregel, time travel, forks, interrupts, subgraphs, DeltaChannel,
every durability mode) with convdb's saver as one more checkpointer fixture value.

The tests come from the sdist of the installed langgraph (`tests/langgraph/suite.py`); each run
is a subprocess talking to this module's broker. The whole suite (648 tests that take a
checkpointer) runs in the default run on the embedded broker: about 8 to 9 minutes on a loaded
2-core machine (measured: 476 s and 531 s), which `pytest -n 2` overlaps with the other files.
On Apache Kafka it runs under -m slow; a representative part of it (`SAMPLE`, about 2 minutes)
is there for a quick check under -m slow too."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from convdb.infra.settings import Settings
from tests.langgraph.suite import add_convdb_fixture, fetch_tests, run_suite

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]

SAMPLE = [
    "tests/test_time_travel.py",  # forks and update_state on old checkpoints (channel versions per branch)
    "tests/test_subgraph_persistence_async.py",  # subgraph checkpoints, the async saver methods
    "tests/test_interruption.py",  # interrupts and resumes
    "tests/test_checkpoint_migration.py",  # checkpoints written by older LangGraph versions
    "tests/test_delta_channel_update_state.py",  # DeltaChannel: its history walk
    "tests/test_delta_channel_parallel_order.py",
    "tests/test_delta_channel_to_plain.py",
    "tests/test_pregel.py",  # the pregel tests below, sync and async
    "tests/test_pregel_async.py",
]
"""The default run's files: about a fifth of the suite's tests."""

PREGEL = (
    "pending_writes_resume or checkpoint_recovery or run_from_checkpoint_id or fork_and_update_task_results"
    " or fork_does_not_apply_pending_writes or send_dedupe_on_resume or subgraph_checkpoint_true"
)
"""Of the pregel files: pending writes, recovery and forks, each in every durability mode (sync,
async, exit) where LangGraph parametrizes it so."""

SELECT = f"not test_pregel or {PREGEL}"


def run(settings: Settings, tmp_path: Path, files: list[str], select: str = "") -> None:
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
    done = run_suite(root, fields, files, timeout=3000, select=select)
    print(f"LangGraph's tests on convdb: {done.summary} ({time.monotonic() - started:.0f} s)")
    print("\n".join(done.failures))
    assert done.returncode == 0, done.output
    assert " passed" in done.summary and "failed" not in done.summary and "error" not in done.summary


@pytest.mark.slow
def test_a_representative_part_of_langgraphs_own_tests_passes_on_the_convdb_saver(
    settings: Settings, tmp_path: Path
) -> None:
    run(settings, tmp_path, SAMPLE, SELECT)


@pytest.mark.slow_on("apache")
@pytest.mark.timeout(3600)
def test_langgraphs_own_graph_tests_pass_on_the_convdb_saver(settings: Settings, tmp_path: Path) -> None:
    run(settings, tmp_path, [])
