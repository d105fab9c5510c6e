"""Scripted conversations against the real broker: event sequence, links, errors, secrets, policies."""

from __future__ import annotations

from pathlib import Path

import pytest

from convdb.infra.dev.tracker.process import ProviderProcess
from convdb.infra.partitioner import partition_for
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.producers.agent import ConfirmationPolicy
from convdb.producers.fleet.owner import FleetContext, PartitionOwner
from convdb.producers.fleet.store import SnapshotStore
from convdb.schemas import ActionEvent, AgentErrorEvent, LLMUsageEvent, ObservationEvent, UserRejectEvent
from convdb.schemas.topics import ALL_TOPICS
from tests.producers._support import direct, events, standalone

pytestmark = pytest.mark.kafka

TASK = "\n".join(
    [
        "Copy the notes and file an issue.",
        '!read_file {"path": "notes.txt"}',
        '!write_file {"path": "copy.txt", "content": "copied: {{last}}"}',
        '+create_issue {"title": "notes copied", "body": "done"}',
    ]
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("the notes")
    return ws


@pytest.fixture
def tracker(tmp_path: Path):  # type: ignore[no-untyped-def]
    with ProviderProcess(tmp_path / "provider.log") as provider:
        yield provider


def test_scripted_conversation_event_sequence_links_and_sources(
    settings: Settings, workspace: Path, tracker: ProviderProcess
) -> None:
    # The litellm path (mock_response, registered price): usage and cost come from litellm.
    runtime, publisher = standalone(settings, workspace=workspace, tracker_url=tracker.url)
    conv = runtime.create("conv-seq", "t1")
    conv.send_message(TASK)
    assert conv.run() == "finished"
    publisher.flush()

    evs = events(settings, "conv-seq")
    kinds = [e.kind for e in evs]
    assert kinds == [
        "system_prompt", "message", "state_update",
        "llm_usage", "action", "observation",
        "llm_usage", "action", "action", "observation", "observation",
        "llm_usage", "message", "state_update",
    ]  # fmt: skip
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
    assert evs[0].parent_id is None
    assert all(e.parent_id == prev.id for prev, e in zip(evs, evs[1:], strict=False))
    sources = {e.kind: e.source for e in evs}
    assert sources == {
        "system_prompt": "agent", "message": "agent", "state_update": "environment", "llm_usage": "agent",
        "action": "agent", "observation": "environment",
    }  # fmt: skip
    assert evs[1].source == "user" and evs[1].role == "user"
    parallel = [e for e in evs if isinstance(e, ActionEvent) and e.tool_name != "read_file"]
    assert len({a.llm_response_id for a in parallel}) == 1  # one LLM response, two actions
    assert {a.effect_class for a in parallel} == {"idempotent", "keyed"}
    assert all(a.operation_id == f"conv-seq/{a.id}" for a in parallel)
    usage = [e for e in evs if isinstance(e, LLMUsageEvent)]
    assert all(u.cost and u.cost > 0 and u.prompt_tokens > 0 for u in usage)
    assert (workspace / "copy.txt").read_text() == "copied: the notes"
    assert tracker.get("/stats")["mutations"] == 1


def test_partition_matches_the_producer(settings: Settings, workspace: Path) -> None:
    runtime, publisher = standalone(direct(settings), workspace=workspace)
    for i in range(8):
        conv = runtime.create(f"p-{i}", "t1")
        conv.send_message("hello")
        assert conv.positions.events_position[0] == partition_for(f"p-{i}", settings.partitions)


def test_bad_tool_arguments_give_an_agent_error_not_a_crash(settings: Settings, workspace: Path) -> None:
    runtime, publisher = standalone(direct(settings), workspace=workspace)
    conv = runtime.create("conv-bad", "t1")
    conv.send_message('!write_file {"bogus": 1}\n!no_such_tool {}\n!read_file not-json')
    assert conv.run() == "finished"
    errors = [e for e in events(settings, "conv-bad") if isinstance(e, AgentErrorEvent)]
    assert [e.tool_name for e in errors] == ["write_file", "no_such_tool", "read_file"]
    assert "bogus" in errors[0].error and "unknown tool" in errors[1].error and "not JSON" in errors[2].error
    assert all(e.tool_call_id for e in errors)


def test_secrets_never_reach_any_topic(settings: Settings, workspace: Path, tracker: ProviderProcess) -> None:
    secret = "s3cr3t-VALUE-42"
    (workspace / "notes.txt").write_text(f"token={secret}")
    runtime, publisher = standalone(
        direct(settings), workspace=workspace, tracker_url=tracker.url, secrets={"API_TOKEN": secret}
    )
    conv = runtime.create("conv-secret", "t1")
    conv.send_message(f"use {secret}\n" + TASK.replace("done", secret))
    assert conv.run() == "finished"
    publisher.flush()
    assert (workspace / "copy.txt").read_text() == f"copied: token={secret}"  # the tool saw the value
    scanned = 0
    for topic in ALL_TOPICS:
        for msg in read_topic(settings, topic.name(settings.namespace)):
            scanned += 1
            assert secret.encode() not in (msg.value() or b"") + (msg.key() or b"")
    assert scanned > 20
    observations = [e for e in events(settings, "conv-secret") if isinstance(e, ObservationEvent)]
    assert "<secret:API_TOKEN>" in observations[0].content


def test_confirmation_policy_waits_then_runs_or_rejects(settings: Settings, workspace: Path) -> None:
    policy = ConfirmationPolicy(mode="risky", threshold="low")
    runtime, publisher = standalone(direct(settings), workspace=workspace, confirmation=policy)
    conv = runtime.create("conv-confirm", "t1")
    conv.send_message('!write_file {"path": "a.txt", "content": "A"}')
    assert conv.run() == "waiting_for_confirmation"
    assert not (workspace / "a.txt").exists()
    assert conv.confirm(True) == "finished"
    assert (workspace / "a.txt").read_text() == "A"

    other = runtime.create("conv-reject", "t1")
    other.send_message('!write_file {"path": "b.txt", "content": "B"}')
    assert other.run() == "waiting_for_confirmation"
    assert other.confirm(False, "not now") == "finished"
    assert not (workspace / "b.txt").exists()
    rejects = [e for e in events(settings, "conv-reject") if isinstance(e, UserRejectEvent)]
    assert [r.reason for r in rejects] == ["not now"]


def test_parallel_actions_run_concurrently_each_with_its_ledger(settings: Settings, workspace: Path) -> None:
    runtime, publisher = standalone(direct(settings, action_concurrency=4), workspace=workspace)
    conv = runtime.create("conv-par", "t1")
    calls = ['!write_file {"path": "f0.txt", "content": "0"}']
    calls += [f'+write_file {{"path": "f{i}.txt", "content": "{i}"}}' for i in range(1, 6)]
    conv.send_message("\n".join(calls))
    assert conv.run() == "finished"
    assert sorted(p.name for p in workspace.glob("f*.txt")) == [f"f{i}.txt" for i in range(6)]
    statuses = {op.status for op in conv.ledger.values()}
    assert len(conv.ledger) == 6 and statuses == {"confirmed"}


def test_stuck_and_max_iterations_stop_the_run(settings: Settings, workspace: Path) -> None:
    runtime, _ = standalone(direct(settings, max_iterations=10), workspace=workspace)
    conv = runtime.create("conv-long", "t1")
    conv.send_message("\n".join(f'!read_file {{"path": "notes.txt", "n": {i}}}' for i in range(5)))
    assert conv.run() == "stuck"  # the same bad call three times in a row
    runtime, _ = standalone(direct(settings, max_iterations=3), workspace=workspace)
    conv2 = runtime.create("conv-iter", "t1")
    conv2.send_message("\n".join(f'!write_file {{"path": "n{i}.txt", "content": "x"}}' for i in range(5)))
    assert conv2.run() == "error"


def test_fork_records_the_source_and_shared_workspace(settings: Settings, workspace: Path) -> None:
    runtime, _ = standalone(direct(settings), workspace=workspace)
    conv = runtime.create("conv-src", "t1")
    conv.send_message("hello")
    conv.run()
    child = conv.fork("conv-fork")
    child.send_message("and now?")
    assert child.run() == "finished"
    fork = events(settings, "conv-fork")[0]
    assert fork.kind == "fork" and fork.source_conversation_id == "conv-src"
    assert fork.workspace_shared is True and fork.source_event_id == conv.state.view.active_leaf
    # A runner that takes the fork's partition over restores it with its source's history.
    ctx = FleetContext(settings, runtime.runtime, SnapshotStore(workspace.parent / "fleet.sqlite"))
    owner = PartitionOwner(ctx, partition_for("conv-fork", settings.partitions), None)
    owner.restore()
    restored = owner.conversations["conv-fork"]
    assert [e.kind for e in restored.view()][:2] == ["system_prompt", "message"]  # the source's history
