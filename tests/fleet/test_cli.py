"""`convdb demo --runners N` and `convdb runner` as real subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convdb.infra.settings import Settings
from tests.producers._support import _base_env
from tests.producers.test_demo_cli import convdb

pytestmark = pytest.mark.kafka


@pytest.mark.brokers
def test_demo_with_two_fleet_runners(settings: Settings, tmp_path: Path) -> None:
    env = {
        **_base_env(),
        **settings.to_env(),
        "CONVDB_LLM": json.dumps({"scripted_backend": "direct"}),
        "CONVDB_DEV": "true",  # the demo's sample credentials, on Apache Kafka too
    }
    done = convdb(["demo", "--conversations", "4", "--runners", "2", "--json"], env, tmp_path, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["statuses"] == {"finished": 4}
    assert summary["effects"] == {"confirmed": 8}  # write_file + create_issue per conversation
    assert summary["provider_mutations"] == 4
    logs = sorted((settings.data_dir / "demo-runners").glob("runner-*.log"))
    assigned = [
        json.loads(line) for log in logs for line in log.read_text().splitlines() if '"assigned"' in line
    ]
    assert {p for line in assigned for p in line["partitions"]} == set(range(settings.partitions))
    # The crash act (a runner killed mid-effect, another resumes) after runner processes left the
    # group; on the embedded broker they leave one at a time (infra.cli.runner._stop_runners)
    crash = summary["crash_resume"]
    assert crash["status"] == "finished" and crash["provider_creations_for_operation"] == 1, crash


def test_runner_bad_input_exits_2(settings: Settings, tmp_path: Path) -> None:
    env = {**_base_env(), **settings.to_env()}
    bad = convdb(["runner", "--idle-exit", "-1"], env, tmp_path)
    assert bad.returncode == 2 and "--idle-exit must be >= 0" in bad.stderr
