"""The demo's summary counts this run's effects; the tenant's (every run the read side saw) apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convdb.infra.settings import Settings
from tests.producers._support import _base_env
from tests.producers.test_demo_cli import convdb

pytestmark = pytest.mark.kafka


def test_a_second_demo_run_reports_its_own_effects(settings: Settings, tmp_path: Path) -> None:
    env = {**_base_env(), **settings.to_env()}
    summaries = []
    for run in ("first", "second"):
        (tmp_path / run).mkdir()
        done = convdb(["demo", "--conversations", "1", "--json"], env, tmp_path / run)
        assert done.returncode == 0, done.stderr[-3000:]
        summaries.append(json.loads(done.stdout))
    first, second = summaries
    # write_file + create_issue: two operations per conversation, this run's only
    assert first["effects_by_status"] == second["effects_by_status"] == {"confirmed": 2}
    # the second run's read side replays the namespace from the start: it sees what the first run's
    # read side saw, plus its own two (each run's crash act adds one more, which the summary may or
    # may not have seen confirmed yet: it waits for this run's conversations only)
    first_seen = first["tenant_effects_by_status"]["confirmed"]
    assert first_seen >= 2
    assert second["tenant_effects_by_status"]["confirmed"] >= first_seen + 2
