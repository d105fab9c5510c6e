"""SDK-written conversations imported into convdb and exported back load the same in the real SDK."""

from __future__ import annotations

import math
import shutil
import uuid
from pathlib import Path

import httpx
import pytest

from convdb.infra.cli.openhands import write_conversation
from convdb.projections.openhands import export
from tests.openhands.conftest import KEY, Convdb, assert_same_in_sdk, run_openhands
from tests.projections.task_tree_events import task_tree

pytestmark = [pytest.mark.kafka, pytest.mark.openhands]


def test_import_then_export_loads_the_same_in_the_sdk(
    convdb: Convdb, openhands_python: Path, tmp_path: Path
) -> None:
    written = run_openhands(openhands_python, "write", str(tmp_path / "openhands"))
    # Loading lets the SDK rewrite base_state.json: compare copies, keep the originals for import.
    shutil.copytree(tmp_path / "openhands", tmp_path / "originals")
    dirs = {name: tmp_path / "originals" / uuid.UUID(cid).hex for name, cid in written.items()}
    originals = {o["id"]: o for o in run_openhands(openhands_python, "load", *map(str, dirs.values()))}

    convdb.cli("import", "openhands", str(tmp_path / "openhands"), "--tenant", "tenant-oh", "--wait", "90")
    summaries = {cid: convdb.conversation(cid, len(originals[cid]["events"])) for cid in written.values()}

    out = tmp_path / "exported"
    for cid in written.values():
        convdb.cli("export", cid, "--format", "openhands", str(out))
    exported = run_openhands(
        openhands_python, "load", *(str(out / uuid.UUID(c).hex) for c in written.values())
    )
    for again in exported:
        original = originals[again["id"]]
        assert_same_in_sdk(again, original)
        assert again["usage"] == original["usage"]
        stats = summaries[again["id"]]["stats"]
        tokens = sum(u["prompt_tokens"] for u in original["usage"].values())
        assert stats["prompt_tokens"] == tokens
        assert math.isclose(stats["cost"], sum(u["cost"] for u in original["usage"].values()), abs_tol=1e-12)

    main = summaries[written["main"]]
    assert main["execution_status"] == "finished" and main["stats"]["counts"]["condensation"] == 1
    assert summaries[written["paused"]]["execution_status"] == "paused"
    view = convdb.get(f"/conversations/{written['main']}/view")
    assert [e["id"] for e in view["events"]][-1] == originals[written["main"]]["leaf"]

    # Importing again, after a runner crash and restore, appends nothing.
    before = {cid: convdb.get(f"/conversations/{cid}")["events"] for cid in written.values()}
    convdb.restart_runner()
    convdb.cli("import", "openhands", str(tmp_path / "openhands"), "--tenant", "tenant-oh")
    convdb.cli(
        "import", "openhands", *(str(tmp_path / "openhands" / uuid.UUID(c).hex) for c in written.values())
    )
    convdb.runner_caught_up()
    assert {cid: convdb.get(f"/conversations/{cid}")["events"] for cid in written.values()} == before


def test_a_conversation_convdb_ran_exports_to_a_directory_the_sdk_loads_with_task_tree_links(
    convdb: Convdb, openhands_python: Path, tmp_path: Path
) -> None:
    cid = str(uuid.uuid4())
    sent = httpx.post(
        f"{convdb.base}/conversations/{cid}/messages",
        headers={"X-API-Key": KEY},
        json={"content": "Read notes.txt"},
        timeout=30,
    )
    assert sent.status_code == 202
    convdb.stopped(cid)
    events = convdb.get(f"/conversations/{cid}/view")["events"]
    convdb.cli("export", cid, "--format", "openhands", str(tmp_path / "out"))
    # A task tree's links, exported as OpenHands conversation tags, load too (one SDK process for all).
    parent, child = str(uuid.uuid4()), str(uuid.uuid4())
    parent_events, child_events = task_tree(parent, child)
    tree = [
        write_conversation(tmp_path / "tree", export(c, e))
        for c, e in ((parent, parent_events), (child, child_events))
    ]
    loaded, *linked = run_openhands(
        openhands_python, "load", str(tmp_path / "out" / uuid.UUID(cid).hex), *map(str, tree)
    )
    assert {o["id"]: o["tags"] for o in linked} == {
        parent: {"child0": child},
        child: {
            "parentconversation": parent,
            "parentoperation": f"{parent}/call/child-0",
            "delegationdepth": "1",
        },
    }
    assert loaded["tags"] == {}
    kinds = {
        "system_prompt": "SystemPromptEvent",
        "message": "MessageEvent",
        "action": "ActionEvent",
        "observation": "ObservationEvent",
        "agent_error": "AgentErrorEvent",
    }
    on_branch = [(e["id"], kinds[e["kind"]]) for e in events if e["kind"] in kinds]
    assert [
        (e["id"], e["kind"]) for e in loaded["events"] if e["kind"] != "ConversationStateUpdateEvent"
    ] == on_branch
    assert loaded["view"] == [e for e, _ in on_branch]
