"""The guide's example (docs/examples/own_tools.py) runs: convdb's Agent with a user's own tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from convdb.infra.settings import Settings
from tests.producers._support import direct

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.kafka
def test_own_tools_example_runs_to_finished_with_one_keyed_note(settings: Settings) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")},
        **direct(settings).to_env(),
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "examples" / "own_tools.py")],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "action       add_note" in done.stdout and "count_notes 1 notes" in done.stdout
    notes = json.loads((settings.data_dir / "notebook.json").read_text())
    assert list(notes.values()) == ["ship the OpenHands bridge"]
