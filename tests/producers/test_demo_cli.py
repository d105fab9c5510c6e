"""`convdb demo` and `convdb run` as real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from convdb.infra.settings import Settings
from tests.producers._support import _base_env

pytestmark = pytest.mark.kafka


def convdb(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "convdb", *args]
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_demo_json_on_the_test_broker(settings: Settings, tmp_path: Path) -> None:
    env = {**_base_env(), **settings.to_env()}
    done = convdb(["demo", "--conversations", "3", "--json"], env, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)  # stdout holds exactly one JSON object
    assert summary["conversations"] == 3 and summary["statuses"] == {"finished": 3}
    assert summary["effects"] == {"confirmed": 6}  # write_file + create_issue per conversation
    assert summary["provider_mutations"] == 3
    assert summary["events"] == 42 and summary["events_by_kind"]["llm_usage"] == 9
    # read back through the query API from the read-side consumer process
    assert sorted(summary["titles"].values())[0].startswith("Summarise notes-1.txt")
    assert set(summary["view_length"].values()) == {14}
    assert {s["llm_calls"] for s in summary["stats"].values()} == {3}
    assert summary["effects_by_status"]["confirmed"] == 6 and summary["unknowns"] == 0
    states = summary["conversation_states"].values()
    assert all(s["agent_says_done"] and s["run_loop_stopped"] and s["effects_all_confirmed"] for s in states)
    fan_out = summary["delegation"]  # one parent, three children on three partitions, folded back
    assert fan_out["children"] == fan_out["children_finished"] == fan_out["partitions"] == 3, fan_out
    assert fan_out["results_in_observation"] == 3 and fan_out["parent_status"] == "finished", fan_out


def test_run_prints_the_events_and_bad_input_exits_2(settings: Settings, tmp_path: Path) -> None:
    env = {**_base_env(), **settings.to_env(), "CONVDB_LLM": json.dumps({"scripted_backend": "direct"})}
    done = convdb(["run", "--conversation", "cli-1", "hello there"], env, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Noted: hello there" in done.stdout and "conversation cli-1: finished" in done.stdout
    bad = convdb(["run", "   "], env, tmp_path)
    assert bad.returncode == 2 and "the task is empty" in bad.stderr


@pytest.mark.slow
def test_demo_on_the_embedded_default(tmp_path: Path) -> None:
    env = {**_base_env(), "CONVDB_DATA_DIR": str(tmp_path / "data")}
    done = convdb(["demo", "--json", "--broker", "embedded"], env, tmp_path, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["statuses"] == {"finished": 3}
    assert summary["archive_objects"] > 0 and summary["archive_export_equals_kafka"] is True


def test_run_registers_secrets_from_a_file_and_detects_the_rest(settings: Settings, tmp_path: Path) -> None:
    from tests.producers._support import events

    env = {**_base_env(), **settings.to_env(), "CONVDB_LLM": json.dumps({"scripted_backend": "direct"})}
    secrets = tmp_path / "secrets.env"
    secrets.write_text("DEPLOY_TOKEN=tok-3f9a-registered-value\n")
    (tmp_path / "workspace").mkdir()
    task = (
        "deploy with tok-3f9a-registered-value and AKIAQWERTYUIOPASDFGH\n"
        '!write_file {"path": "deploy.cfg", "content": "token=<secret:DEPLOY_TOKEN>"}'
    )
    args = [
        "run",
        "--conversation",
        "cli-secrets",
        "--secrets-file",
        str(secrets),
        "--workspace",
        "workspace",
    ]
    done = convdb([*args, task], env, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "workspace" / "deploy.cfg").read_text() == "token=tok-3f9a-registered-value"
    written = json.dumps([e.model_dump(mode="json") for e in events(settings, "cli-secrets")])
    assert "tok-3f9a-registered-value" not in written and "AKIAQWERTYUIOPASDFGH" not in written
    assert "<secret:DEPLOY_TOKEN>" in written and "<secret:detected.aws_access_key_id>" in written
    assert "tok-3f9a" not in done.stdout + done.stderr
    bad = tmp_path / "bad.env"
    bad.write_text("not a pair\n")
    refused = convdb(["run", "--secrets-file", str(bad), "task"], env, tmp_path)
    assert refused.returncode == 2 and "line 1" in refused.stderr and len(refused.stderr.splitlines()) == 1
