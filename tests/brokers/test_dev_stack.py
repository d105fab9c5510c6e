"""`convdb dev up --broker apache`: the dev stack on a real Apache Kafka node, found by later commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convdb.infra.procs import pid_alive
from convdb.schemas.topics import ALL_TOPICS
from tests.infra.test_cli import convdb

pytestmark = pytest.mark.kafka


def test_dev_up_apache_status_topics_down(tmp_path: Path) -> None:
    env = {"CONVDB_DATA_DIR": str(tmp_path / "data"), "CONVDB_NAMESPACE": "devapache"}
    info: dict[str, object] = {}
    try:
        up = convdb(env, "dev", "up", "--broker", "apache", "--no-s3", timeout=300)
        assert up.returncode == 0, up.stderr
        info.update(json.loads(up.stdout))
        assert str(info["bootstrap_servers"]).startswith("127.0.0.1:")
        assert convdb(env, "dev", "status").stdout == up.stdout
        assert info["state"] == "up" and info["broker_kind"] == "apache" and pid_alive(info["broker_pid"])
        listed = convdb(env, "topics", "list")  # found through the data dir alone
        assert listed.returncode == 0, listed.stderr
        assert len(listed.stdout.splitlines()) == len(ALL_TOPICS)
        run = convdb({**env, "CONVDB_LLM__SCRIPTED_BACKEND": "direct"}, "run", "say hello", timeout=120)
        assert run.returncode == 0 and "finished" in run.stdout, run.stderr
    finally:
        down = convdb(env, "dev", "down", timeout=120)
    assert down.returncode == 0 and json.loads(down.stdout) == {"state": "down", "stopped": True}, down.stderr
    assert not pid_alive(int(info["broker_pid"]))  # type: ignore[call-overload]


def test_persistent_is_refused_with_apache(tmp_path: Path) -> None:
    result = convdb({"CONVDB_DATA_DIR": str(tmp_path)}, "dev", "up", "--broker", "apache", "--persistent")
    assert result.returncode == 2 and "--persistent is for the embedded broker" in result.stderr
