"""Crash matrix: SIGKILL the runner at each crash point, for each effect class; a new process resumes.

Per case the provider must have seen each operation at most once (exactly once where the class
allows a retry), the conversation must finish, and an irreversible action whose outcome is
unknown must end in waiting_for_human with an EffectUnknown on the effects topic.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from infra.settings import Settings
from producers.crashpoints import CRASH_POINTS
from producers.provider.process import ProviderProcess
from producers.runner import build_runtime
from schemas import ActionEvent, EffectUnknown, ObservationEvent
from schemas.topics import EFFECTS, EVENTS
from tests.producers._support import (
    by_conversation,
    direct,
    events,
    last_json_line,
    records,
    runner_cmd,
    start,
)

pytestmark = pytest.mark.kafka

POINTS = [p for p in CRASH_POINTS if p != "after_inbox_message"]
TOOLS = {"idempotent": "write_file", "keyed": "create_issue", "irreversible": "notify"}


def task(conversation: str) -> str:
    """One LLM response with three parallel actions, one per effect class."""
    return "\n".join(
        [
            "Write the file, open the issue, tell ops.",
            f'!write_file {{"path": "out-{conversation}.txt", "content": "v1"}}',
            '+create_issue {"title": "crash test", "body": "b"}',
            '+notify {"to": "ops", "text": "hello"}',
        ]
    )


def crash_and_resume(
    settings: Settings, tracker: str, workspace: Path, tool: str
) -> dict[str, tuple[str, dict[str, object]]]:
    """Per crash point: run until SIGKILL there, then resume in a new process. Concurrently."""
    ids = {point: f"cm-{point}-{uuid.uuid4().hex[:6]}" for point in POINTS}
    crashing = {
        point: start(
            runner_cmd("run", cid, workspace, tracker, task(cid)),
            settings,
            CONVDB_CRASH_AT=point,
            CONVDB_CRASH_TOOL=tool,
        )
        for point, cid in ids.items()
    }
    for point, proc in crashing.items():
        _, err = proc.communicate(timeout=90)
        assert proc.returncode == -signal.SIGKILL, f"{point}: rc {proc.returncode}\n{err[-2000:]}"
    resuming = {
        point: start(runner_cmd("resume", cid, workspace, tracker), settings) for point, cid in ids.items()
    }
    out = {}
    for point, proc in resuming.items():
        stdout, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, f"{point}: resume rc {proc.returncode}\n{err[-3000:]}"
        out[point] = (ids[point], last_json_line(stdout))
    return out


def operations(evs: list[Any]) -> dict[str, str]:
    """tool name -> operation id of the conversation's actions."""
    return {e.tool_name: e.operation_id for e in evs if isinstance(e, ActionEvent)}


def assert_observed_once(evs: list[Any], conversation: str, tools: set[str]) -> None:
    evs = sorted(evs, key=lambda e: e.seq)
    actions = {e.id: e.tool_name for e in evs if isinstance(e, ActionEvent)}
    observed = [actions[e.action_id] for e in evs if isinstance(e, ObservationEvent)]
    assert sorted(observed) == sorted(tools), f"{conversation}: observations {observed}"
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))


@pytest.mark.parametrize("effect_class", ["idempotent", "keyed", "irreversible"])
def test_crash_points_never_duplicate_an_effect(
    effect_class: str, make_settings: object, tmp_path: Path
) -> None:
    from infra.kafka import apply_topics

    settings = direct(make_settings(), action_concurrency=1)  # type: ignore[operator]
    apply_topics(settings)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    tool = TOOLS[effect_class]
    with ProviderProcess(tmp_path / "provider.log") as provider:
        results = crash_and_resume(settings, provider.url, workspace, tool)
        by_key = provider.get("/stats")["by_key"]
        all_events = by_conversation(records(settings, EVENTS))
        all_ledger = by_conversation(records(settings, EFFECTS))
        for point, (cid, final) in results.items():
            ops = operations(all_events[cid])
            assert (workspace / f"out-{cid}.txt").read_text() == "v1"
            assert by_key.get(ops["create_issue"]) == 1, (point, by_key)  # keyed: exactly once
            unknown = [r for r in all_ledger[cid] if isinstance(r, EffectUnknown)]
            if tool == "notify" and point in ("after_effect_started", "after_provider_call"):
                # Irreversible and nobody can tell whether it happened: a human decides.
                assert final["status"] == "waiting_for_human", (point, final)
                assert [u.operation_id for u in unknown] == [ops["notify"]]
                expected = 1 if point == "after_provider_call" else 0
                assert by_key.get(ops["notify"], 0) == expected, (point, by_key)
                _human_resolves(settings, workspace, provider.url, cid, ops["notify"], expected)
                assert_observed_once(events(settings, cid), cid, {"write_file", "create_issue", "notify"})
            else:
                assert final["status"] == "finished", (point, final)
                assert not unknown, (point, unknown)
                assert by_key.get(ops["notify"]) == 1, (point, by_key)
                assert_observed_once(all_events[cid], cid, {"write_file", "create_issue", "notify"})
        final_keys = provider.get("/stats")["by_key"]
        assert all(count == 1 for count in final_keys.values()), final_keys


def _human_resolves(
    settings: Settings, workspace: Path, tracker: str, cid: str, operation_id: str, done: int
) -> None:
    """The human says what happened (done) or approves a retry (not done); the run finishes."""
    runtime, publisher = build_runtime(settings, workspace=workspace, tracker_url=tracker)
    conv = runtime.load(cid, "t1")
    assert conv.status == "waiting_for_human"
    status = conv.resolve(operation_id, "confirmed" if done else "retry", "alice", "checked by hand")
    publisher.flush()
    assert status == "finished"
