"""Crash matrix: SIGKILL the runner at each crash point, for each effect class; a new runner resumes.

Each case is a fleet runner process armed with a crash point (its own namespace, so the cases run
concurrently); after the SIGKILL a new runner process takes the partition over, restores and
resumes. Per case the provider must have seen each operation at most once (exactly once where the
class allows a retry), the conversation must finish, and an irreversible action whose outcome is
unknown must end in waiting_for_human with an EffectUnknown on the effects topic.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from convdb.infra.dev.tracker.process import ProviderProcess
from convdb.infra.kafka import apply_topics
from convdb.infra.settings import Settings
from convdb.producers.crashpoints import EFFECT_POINTS
from convdb.producers.fleet.runner import FleetRunner, serve_until
from convdb.producers.fleet.service import build_context
from convdb.schemas import ActionEvent, EffectUnknown, ObservationEvent
from convdb.schemas.topics import EFFECTS, EVENTS
from tests.producers._support import (
    by_conversation,
    direct,
    events,
    final_status,
    records,
    runner_cmd,
    send,
    start,
)

pytestmark = pytest.mark.kafka

POINTS = list(EFFECT_POINTS)
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
    make_settings: Callable[..., Settings], tracker: str, workspace: Path, tool: str
) -> dict[str, tuple[str, Settings, str | None]]:
    """Per crash point: a runner dies there (SIGKILL), then a new runner resumes. Concurrently."""
    cases: dict[str, tuple[str, Settings]] = {}
    for point in POINTS:
        settings = direct(make_settings(namespace=f"t{uuid.uuid4().hex[:10]}"), action_concurrency=1)
        apply_topics(settings)
        cid = f"cm-{point}-{uuid.uuid4().hex[:6]}"
        send(settings, cid, task(cid))
        cases[point] = (cid, settings)
    crashing = {
        point: start(
            runner_cmd(workspace, tracker, idle_exit=60), s, CONVDB_CRASH_AT=point, CONVDB_CRASH_TOOL=tool
        )
        for point, (_, s) in cases.items()
    }
    for point, proc in crashing.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, f"{point}: rc {proc.returncode}\n{err[-2000:]}"
    resuming = {
        point: start(runner_cmd(workspace, tracker, idle_exit=2), s) for point, (_, s) in cases.items()
    }
    out = {}
    for point, proc in resuming.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{point}: resume rc {proc.returncode}\n{err[-3000:]}"
        cid, settings = cases[point]
        out[point] = (cid, settings, final_status(settings, cid))
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
    effect_class: str, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    tool = TOOLS[effect_class]
    with ProviderProcess(tmp_path / "provider.log") as provider:
        results = crash_and_resume(make_settings, provider.url, workspace, tool)
        by_key = provider.get("/stats")["by_key"]
        for point, (cid, settings, final) in results.items():
            all_events = by_conversation(records(settings, EVENTS))
            all_ledger = by_conversation(records(settings, EFFECTS))
            ops = operations(all_events[cid])
            assert (workspace / f"out-{cid}.txt").read_text() == "v1"
            assert by_key.get(ops["create_issue"]) == 1, (point, by_key)  # keyed: exactly once
            unknown = [r for r in all_ledger[cid] if isinstance(r, EffectUnknown)]
            if tool == "notify" and point in ("after_effect_started", "after_provider_call"):
                # Irreversible and nobody can tell whether it happened: a human decides.
                assert final == "waiting_for_human", (point, final)
                assert [u.operation_id for u in unknown] == [ops["notify"]]
                expected = 1 if point == "after_provider_call" else 0
                assert by_key.get(ops["notify"], 0) == expected, (point, by_key)
                _human_resolves(settings, workspace, provider.url, cid, ops["notify"], expected)
                assert_observed_once(events(settings, cid), cid, {"write_file", "create_issue", "notify"})
            else:
                assert final == "finished", (point, final)
                assert not unknown, (point, unknown)
                assert by_key.get(ops["notify"]) == 1, (point, by_key)
                assert_observed_once(all_events[cid], cid, {"write_file", "create_issue", "notify"})
        final_keys = provider.get("/stats")["by_key"]
        assert all(count == 1 for count in final_keys.values()), final_keys


def _human_resolves(
    settings: Settings, workspace: Path, tracker: str, cid: str, operation_id: str, done: int
) -> None:
    """The human says what happened (done) or approves a retry (not done); the run finishes."""
    assert final_status(settings, cid) == "waiting_for_human"
    decision = "confirmed" if done else "retry"
    send(settings, cid, decision, command="resolve", operation_id=operation_id, sender="alice")
    ctx = build_context(settings, workspace, tracker, None, store=workspace.parent / f"{cid}.sqlite")

    def finished(runner: FleetRunner) -> bool:
        conv = runner.conversations().get(cid)
        return runner.idle and conv is not None and conv.status == "finished"

    serve_until(ctx, finished, 90)
    ctx.store.close()
    assert final_status(settings, cid) == "finished"
