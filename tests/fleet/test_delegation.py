"""Delegation under real runner processes: a parent fans out to children on other partitions (owned by
other runners), their results come back through the parent's inbox, and SIGKILLs at the protocol's
named crash points start no child twice and lose no result.
"""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from convdb.infra.kafka import apply_topics
from convdb.infra.partitioner import partition_for
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.producers.delegation import parent_operation_of
from convdb.schemas import (
    ActionEvent,
    EffectConfirmed,
    EffectFailed,
    InboxMessage,
    MessageEvent,
    ObservationEvent,
    StateUpdateEvent,
    SystemPromptEvent,
)
from convdb.schemas.topics import DLQ, EFFECTS, EVENTS, INBOX
from tests.producers._support import by_conversation, direct, records, runner_cmd, send, start

pytestmark = pytest.mark.kafka


def fan_out_message(children: int, **call: Any) -> str:
    """A parent's message: one `delegate` step with `children` tasks (each child just answers)."""
    tasks = [{"message": f"child task {i}"} for i in range(children)]
    return "!delegate " + json.dumps({"tasks": tasks, **call})


@dataclass
class World:
    """What a delegation run left in the log."""

    settings: Settings
    parent: str
    events: dict[str, list[Any]]
    effects: list[Any]
    inbox: list[Any]

    def children(self) -> list[str]:
        """The conversations whose system prompt names `parent` as theirs."""
        return sorted(
            cid
            for cid, evs in self.events.items()
            if any(isinstance(e, SystemPromptEvent) and e.parent_conversation_id == self.parent for e in evs)
        )

    def of(self, cid: str, kind: type) -> list[Any]:
        """A conversation's events of one type, in seq order."""
        return sorted((e for e in self.events.get(cid, []) if isinstance(e, kind)), key=lambda e: e.seq)

    def status(self, cid: str) -> str | None:
        """The last status a conversation's log records."""
        updates = self.of(cid, StateUpdateEvent)
        return updates[-1].execution_status if updates else None

    def observation(self) -> dict[str, Any]:
        """The parent's one observation of its delegation (asserted to be one)."""
        actions = [a for a in self.of(self.parent, ActionEvent) if a.tool_name in ("delegate", "task")]
        assert len(actions) == 1, actions
        seen = [o for o in self.of(self.parent, ObservationEvent) if o.action_id == actions[0].id]
        assert len(seen) == 1, f"the parent observed its delegation {len(seen)} times"
        return json.loads(seen[0].content)


def read_world(settings: Settings, parent: str) -> World:
    """Every event, ledger record and inbox record of the namespace."""
    return World(
        settings,
        parent,
        by_conversation(records(settings, EVENTS)),
        records(settings, EFFECTS),
        records(settings, INBOX),
    )


def run_runners(settings: Settings, workspace: Path, count: int, idle_exit: float = 3.0, **env: str) -> None:
    """`count` runner processes at once, until each is idle for `idle_exit` seconds."""
    procs = [start(runner_cmd(workspace, idle_exit=idle_exit), settings, **env) for _ in range(count)]
    for proc in procs:
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"runner rc {proc.returncode}\n{err[-3000:]}"


def crash_runner(settings: Settings, workspace: Path, point: str, tool: str = "delegate") -> None:
    """One runner that SIGKILLs itself at `point`."""
    proc = start(runner_cmd(workspace, idle_exit=20), settings, CONVDB_CRASH_AT=point, CONVDB_CRASH_TOOL=tool)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == -signal.SIGKILL, f"{point}: rc {proc.returncode}\n{err[-3000:]}"


def fresh(make_settings: Callable[..., Settings], **runtime: Any) -> Settings:
    """A namespace of its own, topics created, scripted model run in-process."""
    settings = direct(make_settings(namespace=f"t{uuid.uuid4().hex[:10]}"), **runtime)
    apply_topics(settings)
    return settings


def check_fan_out(world: World, count: int) -> dict[str, int]:
    """Every child started once and ended once, every result in the parent's one observation once."""
    children = world.children()
    assert len(children) == count, children
    firsts = [
        r for r in world.inbox if isinstance(r, InboxMessage) and r.parent_conversation_id == world.parent
    ]
    assert sorted(r.conversation_id for r in firsts) == children, "a child's first record was written twice"
    for cid in children:
        prompts, users = world.of(cid, SystemPromptEvent), world.of(cid, MessageEvent)
        assert len(prompts) == 1 and prompts[0].delegation_depth == 1
        assert [m.role for m in users] == ["user", "assistant"], f"child {cid}: {[m.role for m in users]}"
        assert world.status(cid) == "finished"
    observed = world.observation()
    assert observed["ended"] == observed["finished"] == count
    assert sorted(c["conversation_id"] for c in observed["children"]) == children
    by_child = {c["conversation_id"]: c for c in observed["children"]}
    for cid in children:
        task = world.of(cid, MessageEvent)[0].content
        assert by_child[cid] == {"conversation_id": cid, "status": "finished", "summary": f"Noted: {task}"}
    reports = [
        r
        for r in world.effects
        if isinstance(r, EffectConfirmed | EffectFailed) and "/child-" in r.operation_id
    ]
    per_child = {}
    for r in reports:
        per_child[r.operation_id] = per_child.get(r.operation_id, 0) + 1
    assert sorted(per_child.values()) == [1] * count, per_child
    assert world.status(world.parent) == "finished"
    assert world.of(world.parent, MessageEvent)[-1].content == "Done: 1 step(s) completed."
    partitions = {partition_for(cid, world.settings.partitions) for cid in children}
    return {"children": count, "partitions": len(partitions), "reports": len(reports)}


@pytest.mark.brokers
def test_a_fan_out_over_partitions_returns_every_childs_result_once(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = fresh(make_settings)
    parent = f"parent-{uuid.uuid4().hex[:8]}"
    send(settings, parent, fan_out_message(4), agent="delegator")
    run_runners(settings, tmp_path, 2)
    figures = check_fan_out(read_world(settings, parent), 4)
    assert figures["partitions"] == settings.partitions == 4  # spread: one child per partition


CRASH_POINTS = ("after_effect_proposed", "after_children_started", "after_child_report")


@pytest.mark.brokers
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_kill_at_each_delegation_crash_point_starts_no_child_twice_and_loses_no_result(
    make_settings: Callable[..., Settings], tmp_path: Path, point: str
) -> None:
    settings = fresh(make_settings)
    parent = f"parent-{uuid.uuid4().hex[:8]}"
    send(settings, parent, fan_out_message(3), agent="delegator")
    crash_runner(settings, tmp_path, point)
    run_runners(settings, tmp_path, 2)
    check_fan_out(read_world(settings, parent), 3)


def test_parent_operation_ids_parse() -> None:
    assert parent_operation_of("c/a/child-3") == ("c/a", 3)
    assert parent_operation_of("c/a") is None


_ = (DLQ, read_topic)
