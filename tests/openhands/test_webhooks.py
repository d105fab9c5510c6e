"""A real OpenHands agent-server streams into a running convdb; convdb then equals OpenHands."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.openhands.conftest import KEY, Convdb, assert_same_in_sdk, inbox_batches, run_openhands

pytestmark = [pytest.mark.kafka, pytest.mark.openhands]


@pytest.mark.openhands_lost_responses(1)
def test_agent_server_webhooks_make_convdb_equal_openhands(
    convdb: Convdb, openhands_python: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "url": f"{convdb.base}/openhands/webhooks",
                "headers": {"X-API-Key": KEY},
                "dir": str(tmp_path / "agent-server"),
                "title": "Text files in the workspace",
            }
        )
    )
    served = run_openhands(openhands_python, "serve", str(spec))
    (original,) = run_openhands(openhands_python, "load", served["dir"])
    cid = served["id"]
    disk_ids = [e["id"] for e in original["events"]]

    summary = convdb.conversation(cid, len(disk_ids))
    assert summary["title"] == "Text files in the workspace"
    assert summary["execution_status"] == served["execution_status"] == "finished"
    usage = original["usage"]["agent"]
    stats = summary["stats"]
    assert (stats["prompt_tokens"], stats["completion_tokens"]) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    assert math.isclose(stats["cost"], usage["cost"], rel_tol=1e-9)
    view = convdb.get(f"/conversations/{cid}/view")
    assert [e["id"] for e in view["events"]] == original["view"]

    payloads = [b.payload for b in inbox_batches(convdb.settings, cid) if b.payload_kind == "events"]
    assert len(payloads) > len(set(payloads)), (
        "the lost response made the agent-server post a stored batch again"
    )

    out = tmp_path / "exported"
    convdb.cli("export", cid, "--format", "openhands", str(out))
    (exported,) = run_openhands(openhands_python, "load", str(out / Path(served["dir"]).name))
    assert [e["id"] for e in exported["events"]] == disk_ids  # same ids, same order, none twice
    assert_same_in_sdk(exported, original)
