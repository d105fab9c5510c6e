"""Delegation under real runner processes: a parent fans out to children on other partitions (owned by
other runners), their results come back through the parent's inbox, and SIGKILLs at the protocol's
named crash points start no child twice and lose no result.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
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
from convdb.producers.delegation import (
    children_ids,
    ended_by_cancel,
    parent_operation_of,
    split_budget,
    summary_of,
)
from convdb.producers.errors import ToolArgumentError
from convdb.producers.tools.delegation import DelegateTool, TaskTool
from convdb.schemas import (
    ActionEvent,
    EffectConfirmed,
    EffectFailed,
    InboxMessage,
    LLMUsageEvent,
    MessageEvent,
    ObservationEvent,
    StateUpdateEvent,
    SystemPromptEvent,
)
from convdb.schemas.topics import DLQ, EFFECTS, EVENTS, INBOX
from tests.conftest import wait_until
from tests.fleet._support import RunnerProc, logs_of
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


def run_runners(settings: Settings, workspace: Path, count: int, idle_exit: float = 2.0, **env: str) -> None:
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
        if isinstance(r, EffectConfirmed | EffectFailed)
        and r.conversation_id == world.parent
        and "/child-" in r.operation_id
    ]
    per_child = {}
    for r in reports:
        per_child[r.operation_id] = per_child.get(r.operation_id, 0) + 1
    assert sorted(per_child.values()) == [1] * count, per_child
    assert world.status(world.parent) == "finished"
    assert world.of(world.parent, MessageEvent)[-1].content == "Done: 1 step(s) completed."
    partitions = {partition_for(cid, world.settings.partitions) for cid in children}
    return {"children": count, "partitions": len(partitions), "reports": len(reports)}


def fan_out_latency(world: World) -> dict[str, float]:
    """Seconds from the parent's delegate action to the last child running, and from the last child's
    end to the parent's observation (event timestamps: one machine's clock)."""
    (action,) = [a for a in world.of(world.parent, ActionEvent) if a.tool_name == "delegate"]
    (seen,) = [o for o in world.of(world.parent, ObservationEvent) if o.action_id == action.id]
    running = [
        next(u.timestamp for u in world.of(c, StateUpdateEvent) if u.execution_status == "running")
        for c in world.children()
    ]
    ended = [world.of(c, StateUpdateEvent)[-1].timestamp for c in world.children()]
    return {
        "propose_to_all_running_s": (max(running) - action.timestamp).total_seconds(),
        "last_end_to_observed_s": (seen.timestamp - max(ended)).total_seconds(),
    }


@pytest.mark.brokers
def test_a_fan_out_over_partitions_returns_every_childs_result_once(
    broker: Any, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = fresh(make_settings)
    parent = f"parent-{uuid.uuid4().hex[:8]}"
    send(settings, parent, fan_out_message(4), agent="delegator")
    run_runners(settings, tmp_path, 2)
    world = read_world(settings, parent)
    figures = check_fan_out(world, 4)
    assert figures["partitions"] == settings.partitions == 4  # spread: one child per partition
    latency = fan_out_latency(world)
    print(f"fan-out latency ({broker.name}, 4 children, 2 runners): {latency}")
    assert 0 < latency["propose_to_all_running_s"] < 30 and 0 < latency["last_end_to_observed_s"] < 30


CRASH_POINTS = ("after_effect_proposed", "after_children_started", "after_child_report")
"""After the parent proposed; after the children's first records; after a child's report was
recorded, before the parent observed (a child that finished is not killed: its end and its report
are one transaction)."""
FAST_POINTS = {"embedded": "after_children_started", "apache": "after_child_report"}
"""The default run splits the points between the brokers; `-m slow` runs every point on both."""


def crash_case(make_settings: Callable[..., Settings], workspace: Path, point: str) -> dict[str, int]:
    """A fan-out of 3 whose runner is SIGKILLed at `point`; two runners then finish it."""
    settings = fresh(make_settings)
    parent = f"parent-{uuid.uuid4().hex[:8]}"
    send(settings, parent, fan_out_message(3), agent="delegator")
    crash_runner(settings, workspace, point)
    run_runners(settings, workspace, 2)
    return check_fan_out(read_world(settings, parent), 3)


@pytest.mark.brokers
def test_a_kill_at_a_delegation_crash_point_starts_no_child_twice_and_loses_no_result(
    broker: Any, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    crash_case(make_settings, tmp_path, FAST_POINTS[broker.name])


@pytest.mark.slow
@pytest.mark.brokers
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_kill_at_every_delegation_crash_point_starts_no_child_twice_and_loses_no_result(
    make_settings: Callable[..., Settings], tmp_path: Path, point: str
) -> None:
    crash_case(make_settings, tmp_path, point)


def test_childrens_budgets_are_taken_from_what_is_left_of_the_parents() -> None:
    assert split_budget(None, [None, 0.5]) == [None, 0.5]  # no budget above: the runner's limit
    assert split_budget(1.0, [None, None]) == [0.5, 0.5]
    assert split_budget(1.0, [0.25, None, None]) == [0.25, 0.375, 0.375]
    assert split_budget(1.0, [2.0, None]) == [1.0, 0.0]  # never more than is left


def test_a_childs_summary_is_its_last_report_else_its_last_answer() -> None:
    def event(kind: type, **fields: Any) -> Any:
        return kind.model_construct(**fields)

    said = event(MessageEvent, role="assistant", content="my last words")
    report = event(ActionEvent, tool_name="report", arguments=json.dumps({"result": "42"}))
    later = event(ActionEvent, tool_name="report", arguments=json.dumps({"result": "43"}))
    broken = event(ActionEvent, tool_name="report", arguments="{not json")
    assert summary_of([said]) == "my last words" and summary_of([]) == ""
    assert summary_of([report, said]) == "42"
    assert summary_of([report, later, broken, said]) == "43"


def test_a_report_continues_a_cancelled_parent_only_for_a_message_sent_after_the_cancel() -> None:
    def event(kind: type, **fields: Any) -> Any:
        return kind.model_construct(**fields)

    asked = event(MessageEvent, role="user", content="go")
    cancel = event(StateUpdateEvent, execution_status="error", reason="cancelled by user")
    budget = event(StateUpdateEvent, execution_status="error", reason="budget of 1 USD spent (1.2)")
    running = event(StateUpdateEvent, execution_status="running", reason="")
    assert ended_by_cancel([asked, running, cancel])
    assert not ended_by_cancel([asked, running, cancel, asked])  # a message after it: answered
    assert not ended_by_cancel([asked, running]) and not ended_by_cancel([asked, budget])


def test_parent_operation_ids_parse_and_calls_are_checked() -> None:
    assert parent_operation_of("c/a/child-3") == ("c/a", 3)
    assert parent_operation_of("c/a") is None
    with pytest.raises(ToolArgumentError, match="wait_for \\(2\\) is more than the 1 task"):
        DelegateTool().parse(json.dumps({"tasks": [{"message": "a"}], "wait_for": 2}))
    with pytest.raises(ToolArgumentError, match="tasks: List should have at least 1 item"):
        DelegateTool().parse(json.dumps({"tasks": []}))
    with pytest.raises(ToolArgumentError, match="message: String should have at least 1 character"):
        TaskTool().parse(json.dumps({"message": ""}))


CHARGED_PLAN = (
    "!task "
    + json.dumps(
        {"message": "\n".join(f'!read_file {{"path": "f{i}.txt"}}' for i in range(10)), "budget_usd": 1.0}
    )
    + '\n!read_file {"path": "a.txt"}'
)
"""A parent's plan: a child of ten steps (asking for more than is left: it gets the rest), then a step
of its own."""


def observation_of(world: World, cid: str) -> ObservationEvent:
    """The one observation of a conversation's delegation action."""
    (action,) = [a for a in world.of(cid, ActionEvent) if a.tool_name in ("delegate", "task")]
    (seen,) = [o for o in world.of(cid, ObservationEvent) if o.action_id == action.id]
    return seen


@pytest.mark.brokers
@pytest.mark.slow_on("apache")
def test_limits_and_refused_children_have_their_documented_outcome(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """A child id taken by another tenant's conversation or by an unrelated one of the same tenant
    (the parent's re-proposal cannot change them: they are derived), too many children, a child at
    the depth limit delegating again (the only way back up a tree: ids are fresh, never an
    ancestor's): each ends with its reason, and every parent finishes."""
    settings = fresh(make_settings, delegation_max_children=3, delegation_max_depth=1)
    collide, wide, deep = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("collide", "wide", "deep"))
    send(settings, collide, fan_out_message(3), agent="delegator")
    crash_runner(settings, tmp_path, "after_effect_proposed")  # its children's ids are now fixed
    (action,) = [e for e in records(settings, EVENTS, collide) if isinstance(e, ActionEvent)]
    ids = children_ids(action.operation_id, 3, settings.partitions)
    send(settings, ids[0], "mine", tenant="someone-else")
    send(settings, ids[1], "an unrelated conversation of the same tenant")
    send(settings, wide, fan_out_message(4), agent="delegator")
    first = f"first-{uuid.uuid4().hex[:8]}"
    send(settings, first, fan_out_message(3, wait_for=1), agent="delegator")
    frugal = f"frugal-{uuid.uuid4().hex[:8]}"
    steps = '!read_file {"path": "a.txt"}\n!read_file {"path": "b.txt"}'
    send(settings, frugal, "!task " + json.dumps({"message": steps, "budget_usd": 1e-9}), agent="delegator")
    nested = "!task " + json.dumps({"message": "grandchild"})
    send(settings, deep, "!task " + json.dumps({"message": nested}), agent="delegator")
    charged = f"charged-{uuid.uuid4().hex[:8]}"
    send(
        settings,
        charged,
        "!task " + json.dumps({"message": CHARGED_PLAN, "budget_usd": 8e-4}),
        agent="delegator",
    )
    reporter = f"reporter-{uuid.uuid4().hex[:8]}"
    explicit = '!report {"result": "the explicit result"}'
    send(settings, reporter, "!task " + json.dumps({"message": explicit}), agent="delegator")
    run_runners(settings, tmp_path, 1)
    world = read_world(settings, collide)

    outcome = json.loads(observation_of(world, collide).content)
    statuses = {c["conversation_id"]: c for c in outcome["children"]}
    assert statuses[ids[0]]["status"] == statuses[ids[1]]["status"] == "rejected"
    assert "TenantMismatchError" in statuses[ids[0]]["summary"]
    assert "already exists and is not the child" in statuses[ids[1]]["summary"]
    assert statuses[ids[2]] == {
        "conversation_id": ids[2],
        "status": "finished",
        "summary": "Noted: child task 2",
    }
    assert [m.content for m in world.of(ids[1], MessageEvent) if m.role == "user"] == [
        "an unrelated conversation of the same tenant"
    ]  # the existing conversation was not touched
    letters = [m for m in read_topic(settings, DLQ.name(settings.namespace))]
    assert sorted(m.key().decode() for m in letters) == sorted(ids[:2])

    wide_obs = observation_of(world, wide)
    assert wide_obs.is_error and "refused: 4 children asked, at most 3" in wide_obs.content
    assert not [r for r in world.inbox if getattr(r, "parent_conversation_id", None) == wide]

    (child,) = [c for c, evs in world.events.items() if any(
        isinstance(e, SystemPromptEvent) and e.parent_conversation_id == deep for e in evs)]  # fmt: skip
    refused = observation_of(world, child)
    assert refused.is_error and "at depth 1 of its task tree and the limit is 1" in refused.content
    assert json.loads(observation_of(world, deep).content)["children"][0]["status"] == "finished"
    for cid in (collide, wide, deep, child):
        assert world.status(cid) == "finished", cid

    # wait_for=1: the parent observes once one child ended (more may have by then); the others'
    # reports come later, are recorded on its ledger, and change nothing else.
    early = json.loads(observation_of(world, first).content)
    assert 1 <= early["ended"] == early["finished"] <= 3 and early["timed_out"] is False
    assert sorted({c["status"] for c in early["children"]} - {"finished"}) in ([], ["running"])
    late = [
        r
        for r in world.effects
        if r.conversation_id == first and isinstance(r, EffectConfirmed | EffectFailed)
    ]
    assert sorted(r.operation_id.rsplit("/", 1)[-1] for r in late if "/child-" in r.operation_id) == [
        "child-0", "child-1", "child-2"
    ]  # fmt: skip
    assert world.status(first) == "finished"

    # A child's budget comes from its parent; spent, the child stops and its parent hears "budget".
    (spender,) = [c for c, evs in world.events.items() if any(
        isinstance(e, SystemPromptEvent) and e.parent_conversation_id == frugal for e in evs)]  # fmt: skip
    assert world.of(spender, SystemPromptEvent)[0].budget_usd == 1e-9
    assert "budget of 1e-09 USD spent" in world.of(spender, StateUpdateEvent)[-1].reason
    (result,) = json.loads(observation_of(world, frugal).content)["children"]
    assert result["status"] == "budget" and world.status(frugal) == "finished"

    # A child that reports its result explicitly hands that to its parent, not its last message.
    (result,) = json.loads(observation_of(world, reporter).content)["children"]
    assert result["status"] == "finished" and result["summary"] == "the explicit result"
    assert world.of(result["conversation_id"], MessageEvent)[-1].content == "Done: 1 step(s) completed."


@pytest.mark.brokers
@pytest.mark.slow_on("apache")
def test_a_child_that_does_not_end_leaves_the_parent_to_its_deadline_and_reports_late(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """Children on a frozen runner's partitions do not end: at its deadline the parent observes what
    it has (the others `timed_out`) and runs on; when the runner thaws, their late reports are
    recorded on the parent's ledger and change nothing else (one observation)."""
    settings = fresh(make_settings, kafka={"embedded_session_timeout_ms": 30000, "session_timeout_ms": 30000})
    first = RunnerProc(settings, tmp_path, None, tmp_path / "a.log")
    second: RunnerProc | None = None
    try:
        wait_until(
            lambda: first.owned() == {0, 1, 2, 3}, 60, "the first runner's assignment", logs=first.logs
        )
        second = RunnerProc(settings, tmp_path, None, tmp_path / "b.log")
        runners = [first, second]
        wait_until(
            lambda: (
                second.owned()
                and len(first.owned() | second.owned()) == 4
                and not first.owned() & second.owned()
            ),
            60,
            "two runners sharing the partitions",
            logs=logs_of(runners),
        )
        second.signal(signal.SIGSTOP)
        frozen = second.owned()
        parent = next(
            p for p in (f"parent-{uuid.uuid4().hex[:8]}" for _ in range(1000))
            if partition_for(p, settings.partitions) in first.owned()
        )  # fmt: skip
        send(settings, parent, fan_out_message(3, deadline_s=2), agent="delegator")

        def observed() -> World | None:
            world = read_world(settings, parent)
            return world if world.status(parent) == "finished" else None

        world = wait_until(observed, 60, "the parent's observation at its deadline", logs=logs_of(runners))
        outcome = world.observation()
        late = {
            c["conversation_id"]
            for c in outcome["children"]
            if partition_for(c["conversation_id"], 4) in frozen
        }
        assert late, "the children are spread over every partition: some are on the frozen runner's"
        assert outcome["timed_out"] is True
        for child in outcome["children"]:
            expected = "timed_out" if child["conversation_id"] in late else "finished"
            assert child["status"] == expected, outcome
        second.signal(signal.SIGCONT)

        def reported() -> World | None:
            world = read_world(settings, parent)
            done = [
                r for r in world.effects if isinstance(r, EffectConfirmed) and "/child-" in r.operation_id
            ]
            return world if len(done) == 3 else None

        world = wait_until(reported, 60, "the late children's reports", logs=logs_of(runners))
        assert world.observation() == outcome  # one observation, unchanged
        assert all(world.status(c) == "finished" for c in late)
    finally:
        first.stop()
        if second is not None:
            second.stop()


@pytest.mark.brokers
@pytest.mark.slow_on("apache")
def test_pause_and_resume_of_a_parent_go_down_its_whole_tree(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """A pause sent to a parent that waits for its child reaches the child (which waits for its own
    child) and the grandchild; the child pauses at its next step and its parent keeps waiting. A
    resume sent to the parent goes the same way down; then the whole tree finishes."""
    settings = fresh(make_settings)
    parent = f"parent-{uuid.uuid4().hex[:8]}"
    grandchild_task = "!task " + json.dumps({"message": "the grandchild's task"})
    send(settings, parent, "!task " + json.dumps({"message": grandchild_task}), agent="delegator")
    send(settings, parent, "", command="pause")
    runner = RunnerProc(settings, tmp_path, None, tmp_path / "runner.log")
    try:

        def child_paused() -> World | None:
            world = read_world(settings, parent)
            kids = world.children()
            return world if kids and world.status(kids[0]) == "paused" else None

        world = wait_until(child_paused, 60, "the child to pause", logs=runner.logs)
        (child,) = world.children()
        (grandchild,) = [c for c, evs in world.events.items() if any(
            isinstance(e, SystemPromptEvent) and e.parent_conversation_id == child for e in evs)]  # fmt: skip
        assert world.status(parent) == "running"  # waiting for its child: nothing to pause yet
        send(settings, parent, "", command="resume")

        def finished() -> World | None:
            world = read_world(settings, parent)
            return world if world.status(parent) == "finished" else None

        world = wait_until(finished, 60, "the tree to finish after the resume", logs=runner.logs)
    finally:
        runner.stop()
    assert world.status(child) == world.status(grandchild) == "finished"
    sent = [
        (r.conversation_id, r.command)
        for r in world.inbox
        if isinstance(r, InboxMessage)
        and r.sender.startswith("conversation:")
        and r.child_conversation_id is None  # not a child's report
        and r.command in ("pause", "resume")
    ]
    # Each went down once to each conversation still working below (the grandchild had ended by the resume).
    assert sorted(sent) == sorted([(child, "pause"), (grandchild, "pause"), (child, "resume")]), sent
    assert json.loads(observation_of(world, parent).content)["children"][0]["status"] == "finished"


@pytest.mark.slow
@pytest.mark.brokers
def test_runners_killed_at_random_moments_during_fan_outs_start_each_child_once_and_lose_no_result(
    broker: Any, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """Three parents fan out to six children each over four partitions and three runners; a random
    runner (a parent's, a child's, or both at once) is SIGKILLed every 0.3-2 s and replaced, for
    as long as the tree works. Then: each child started once, each result in its parent's one
    observation once, nothing left waiting."""
    settings = fresh(make_settings)
    rng = random.Random(24)
    parents = [f"parent-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    for parent in parents:
        send(settings, parent, fan_out_message(6), agent="delegator")
    made = iter(range(1000))
    runners = [RunnerProc(settings, tmp_path, None, tmp_path / f"r{next(made)}.log") for _ in range(3)]
    kills = 0

    def all_finished() -> bool:
        events = by_conversation(records(settings, EVENTS))
        last = {
            cid: [e for e in sorted(evs, key=lambda e: e.seq) if isinstance(e, StateUpdateEvent)][-1:]
            for cid, evs in events.items()
        }
        return all(last.get(p) and last[p][0].execution_status == "finished" for p in parents)

    try:
        until = time.monotonic() + 45
        while time.monotonic() < until and not all_finished():
            time.sleep(rng.uniform(0.3, 2.0))
            victim = rng.randrange(len(runners))
            runners[victim].signal(signal.SIGKILL)
            runners[victim].proc.wait(10)
            runners[victim].stop()
            kills += 1
            runners[victim] = RunnerProc(settings, tmp_path, None, tmp_path / f"r{next(made)}.log")
        wait_until(all_finished, 180, "every parent to finish after the kills", logs=logs_of(runners))
    finally:
        for runner in runners:
            runner.stop()
    children = 0
    for parent in parents:
        children += check_fan_out(read_world(settings, parent), 6)["children"]
    print(
        f"random kills ({broker.name}): {children} children, {kills} runner kills, "
        "0 duplicates, 0 lost results"
    )
    assert kills >= 3 and children == 18


def cancelled_by(world: World, cid: str) -> str | None:
    """Who cancelled a conversation's run (its last status is `error`, reason `cancelled by ...`)."""
    (last,) = world.of(cid, StateUpdateEvent)[-1:]
    prefix = "cancelled by "
    ok = last.execution_status == "error" and last.reason.startswith(prefix)
    return last.reason.removeprefix(prefix) if ok else None


@pytest.mark.brokers
@pytest.mark.slow_on("apache")
def test_a_cancel_and_the_budget_go_down_the_tree_and_an_ended_child_counts_for_its_parent(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """Two trees (parent -> child -> grandchild), paused by a pause sent to the parent once the
    grandchild finished, one runner. A cancel sent to the first parent ends its run and goes on to
    its child: the child reports `cancelled` and the parent, which observes it once, does not run
    on. In the second tree a user cancels the child: its parent's wait condition counts it, the
    parent observes `cancelled` and, resumed, finishes. A third tree charges a child's spending to its
    parent's budget (`CHARGED_PLAN`)."""
    settings = fresh(make_settings)
    first, second = (f"parent-{uuid.uuid4().hex[:8]}" for _ in range(2))
    nested = "!task " + json.dumps({"message": "!task " + json.dumps({"message": "the grandchild's task"})})
    for parent in (first, second):
        send(settings, parent, nested, agent="delegator")
        send(settings, parent, "", command="pause")
    charged = f"charged-{uuid.uuid4().hex[:8]}"
    send(
        settings,
        charged,
        "!task " + json.dumps({"message": CHARGED_PLAN, "budget_usd": 8e-4}),
        agent="delegator",
    )
    runner = RunnerProc(settings, tmp_path, None, tmp_path / "runner.log")

    def below(world: World, cid: str) -> str | None:
        kids = [c for c, evs in world.events.items() if any(
            isinstance(e, SystemPromptEvent) and e.parent_conversation_id == cid for e in evs)]  # fmt: skip
        return kids[0] if kids else None

    def observed(world: World, cid: str) -> bool:
        return bool(world.of(cid, ObservationEvent))

    try:

        def paused() -> World | None:
            world = read_world(settings, first)
            kids = [below(world, p) for p in (first, second)]
            return world if all(k and world.status(k) == "paused" for k in kids) else None

        world = wait_until(paused, 60, "both children to pause", logs=runner.logs)
        child_a, child_b = below(world, first), below(world, second)
        assert child_a is not None and child_b is not None
        send(settings, first, "", command="cancel")
        send(settings, child_b, "", command="cancel")

        def counted() -> World | None:
            world = read_world(settings, first)
            return world if observed(world, first) and observed(world, second) else None

        wait_until(counted, 60, "both parents' observations of their cancelled child", logs=runner.logs)
        send(settings, second, "", command="resume")

        def finished() -> World | None:
            world = read_world(settings, second)
            return world if world.status(second) == world.status(charged) == "finished" else None

        world = wait_until(finished, 60, "the second and the charged parents to finish", logs=runner.logs)
    finally:
        runner.stop()
    grand_a, grand_b = below(world, child_a), below(world, child_b)
    assert grand_a is not None and grand_b is not None
    assert world.status(grand_a) == world.status(grand_b) == "finished"
    assert cancelled_by(world, first) == "user"
    assert cancelled_by(world, child_a) == f"conversation:{first}"
    assert cancelled_by(world, child_b) == "user"
    for parent, child in ((first, child_a), (second, child_b)):
        (result,) = json.loads(observation_of(world, parent).content)["children"]
        assert result == {"conversation_id": child, "status": "cancelled", "summary": result["summary"]}
    # The cancelled parent did not run on after its child's report: its run's last status is the cancel.
    assert not [m for m in world.of(first, MessageEvent) if m.content.startswith("Done")]
    assert world.status(second) == "finished"
    cancels = sorted(
        (r.conversation_id, r.sender)
        for r in world.inbox
        if isinstance(r, InboxMessage) and r.command == "cancel"
    )
    assert cancels == sorted([(first, "user"), (child_a, f"conversation:{first}"), (child_b, "user")]), (
        cancels
    )

    # A child's spending is charged to its parent's budget: the parent (8e-4 USD) made one call
    # (~4.7e-4), its child got the rest and spent it (stopped: `budget`); with the child's cost
    # counted the parent stops before its second step (its own cost alone would have allowed it).
    middle = below(world, charged)
    assert middle is not None
    leaf = below(world, middle)
    assert leaf is not None
    own, spent_below = (sum(u.cost or 0.0 for u in world.of(c, LLMUsageEvent)) for c in (middle, leaf))
    assert len(world.of(middle, LLMUsageEvent)) == 1 and own < 8e-4 <= own + spent_below
    assert json.loads(observation_of(world, middle).content)["children"][0]["status"] == "budget"
    stop = world.of(middle, StateUpdateEvent)[-1]
    assert (
        stop.execution_status == "error"
        and stop.reason == f"budget of 0.0008 USD spent ({own + spent_below:.6f})"
    )
    (up,) = [r for r in world.inbox if isinstance(r, InboxMessage) and r.child_conversation_id == middle]
    assert up.child_status == "budget" and up.child_cost_usd == pytest.approx(own + spent_below)
    assert json.loads(observation_of(world, charged).content)["children"][0]["status"] == "budget"
