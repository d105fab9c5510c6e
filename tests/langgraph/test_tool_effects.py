"""Tool calls under convdb's effect protocol: `ToolNode(wrap_tool_call=...)` and `create_agent`'s
middleware (`convdb.langgraph.ToolEffects`, `EffectMiddleware`).

In this process (convdb's saver, standalone): a ToolNode whose task dies after the charge was
confirmed, before the node's writes were saved, is re-executed on `invoke(None)` and gets the
recorded ToolMessage, the card charged once (sync and async). As hosted graphs (`convdb runner
--graph`): the runner is SIGKILLed right after the provider charged, a second runner re-executes
the ToolNode (or create_agent's tool node) and the provider's lookup finds the charge; without a
lookup the call lands in the human queue (`EffectUnknown` on the ledger) and the graph finishes
after a resolve.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Command

from convdb.infra.kafka import apply_topics
from convdb.infra.settings import Settings
from convdb.langgraph import ConvdbSaver, ToolEffects
from convdb.producers.graph_tools import _decode, _encode
from convdb.schemas import ActionEvent, MessageEvent, ObservationEvent
from convdb.schemas.topics import EFFECTS
from tests.conftest import wait_until
from tests.langgraph import tool_graphs
from tests.producers._support import direct, events, final_status, records, runner_cmd, send, start

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]


def charges(work: Path) -> list[str]:
    log = work / "provider.log"
    return log.read_text().splitlines() if log.exists() else []


# -- in this process: the ToolNode re-executed after its task died ----------------------------------


class DiesOnce:
    """Around ToolEffects: the first call dies after the charge was confirmed (the node's writes
    are never saved), as a process killed there would."""

    def __init__(self, effects: ToolEffects) -> None:
        self.effects = effects
        self.died = False

    def _die(self) -> None:
        if not self.died:
            self.died = True
            raise SystemError("died after the charge was confirmed")

    def wrap(self, request: Any, execute: Any) -> Any:
        answer = self.effects.wrap_tool_call(request, execute)
        self._die()
        return answer

    async def awrap(self, request: Any, execute: Any) -> Any:
        answer = await self.effects.awrap_tool_call(request, execute)
        self._die()
        return answer


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CRASH_WORK", str(tmp_path))
    return tmp_path


@pytest.fixture
def saver(settings: Settings) -> Iterator[ConvdbSaver]:
    saver = ConvdbSaver(settings)
    yield saver
    saver.close()


def tool_node_graph(saver: ConvdbSaver, dies: DiesOnce) -> Any:
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    model = tool_graphs.ScriptedModel()
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    node = ToolNode(
        [tool_graphs.charge_card],
        wrap_tool_call=dies.wrap,
        awrap_tool_call=dies.awrap,
        handle_tool_errors=False,
    )
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_re_executed_tool_node_returns_the_recorded_tool_message(
    saver: ConvdbSaver, work: Path, mode: str
) -> None:
    dies = DiesOnce(ToolEffects({"charge_card": "irreversible"}))
    graph = tool_node_graph(saver, dies)
    config = {"configurable": {"thread_id": f"shop-{uuid.uuid4().hex[:8]}"}}

    def invoke(value: Any) -> Any:
        if mode == "sync":
            return graph.invoke(value, config, durability="sync")
        return asyncio.run(graph.ainvoke(value, config, durability="sync"))

    with pytest.raises(SystemError):
        invoke({"messages": [HumanMessage("two tickets")]})
    assert len(charges(work)) == 1
    (line,) = charges(work)
    operation_id = line.split()[1]
    assert operation_id.startswith(config["configurable"]["thread_id"] + "/") and operation_id.endswith(
        ":call-1"
    )
    assert saver.operation(config["configurable"]["thread_id"], operation_id).status.value == "confirmed"  # type: ignore[union-attr]

    out = invoke(None)  # the ToolNode runs again: its tool call is not
    assert len(charges(work)) == 1
    answer = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert json.loads(answer.content) == {"charge_id": "ch-1", "amount": 42}
    assert answer.tool_call_id == "call-1" and answer.name == "charge_card"
    assert out["messages"][-1].content == f"Charged: {answer.content}"


def test_recorded_answers_read_back_as_tool_messages_and_commands() -> None:
    """The ledger's JSON of a ToolMessage and of a Command, and what a lookup or a human records."""
    saver = type("S", (), {"serde": JsonPlusSerializer()})()
    call = {"name": "charge_card", "id": "call-1", "args": {}}
    message = ToolMessage(content="ok", tool_call_id="call-1", name="charge_card", artifact={"r": 1})
    back = _decode(saver, json.loads(json.dumps(_encode(saver, message))), call)  # type: ignore[arg-type]
    assert back == message
    command = Command(update={"messages": [ToolMessage(content="moved", tool_call_id="call-1")]}, goto="x")
    again = _decode(saver, json.loads(json.dumps(_encode(saver, command))), call)  # type: ignore[arg-type]
    assert isinstance(again, Command) and again.goto == "x" and again.update["messages"][0].content == "moved"  # type: ignore[index]
    assert _decode(saver, {"charge_id": "ch-1"}, call).content == '{"charge_id": "ch-1"}'  # type: ignore[arg-type, union-attr]
    assert _decode(saver, None, call).tool_call_id == "call-1"  # type: ignore[arg-type, union-attr]


# -- hosted: a runner SIGKILLed after the provider call ------------------------------------------------


@pytest.fixture
def hosted_settings(make_settings: Any) -> Settings:
    settings = direct(make_settings(namespace=f"g{uuid.uuid4().hex[:10]}"))
    apply_topics(settings)
    return settings


def runner(settings: Settings, work: Path, graph: str, idle_exit: float, **env: str) -> Any:
    argv = [
        *runner_cmd(work / "workspace", idle_exit=idle_exit),
        "--graph",
        f"tests.langgraph.tool_graphs:{graph}",
    ]
    return start(argv, settings, CRASH_WORK=str(work), **env)


def run_to_idle(settings: Settings, work: Path, graph: str, **env: str) -> None:
    proc = runner(settings, work, graph, 3, **env)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]


def killed_after_the_charge(settings: Settings, work: Path, graph: str, **env: str) -> str:
    """A message; a runner SIGKILLed right after the provider charged; a second runner resumes."""
    cid = f"shop-{uuid.uuid4().hex[:8]}"
    send(settings, cid, "two tickets, please")
    first = runner(settings, work, graph, 60, CRASH_AT="after_call", **env)
    try:
        wait_until(lambda: (work / "paused").exists() or first.poll() is not None, timeout=90)
        assert first.poll() is None, first.communicate()[1][-3000:]
        first.send_signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate()
    os.remove(work / "paused")
    run_to_idle(settings, work, graph, **env)
    return cid


# The hosted kill runs on the embedded broker by default (about 20 s of runner start-ups); on Apache
# Kafka under -m slow: the ledger's writes through the hosted writer are the same as `@effect`'s,
# which tests/langgraph/test_hosted.py kills on both brokers by default.
@pytest.mark.slow_on("apache")
@pytest.mark.parametrize(
    "graph",
    [
        "make_tool_node",
        # create_agent's middleware is the same ToolEffects; its kill test (about 15 s) under -m slow.
        pytest.param("make_agent", marks=pytest.mark.slow),
    ],
)
def test_a_hosted_agents_tool_call_charges_once_when_its_runner_is_killed_after_the_charge(
    hosted_settings: Settings, tmp_path: Path, graph: str
) -> None:
    cid = killed_after_the_charge(hosted_settings, tmp_path, graph)
    assert len(charges(tmp_path)) == 1, charges(tmp_path)
    assert final_status(hosted_settings, cid) == "finished"
    evs = events(hosted_settings, cid)
    (action,) = [e for e in evs if isinstance(e, ActionEvent)]
    (observation,) = [e for e in evs if isinstance(e, ObservationEvent)]
    assert action.tool_call_id == "call-1" and json.loads(observation.content) == {
        "charge_id": "ch-1",
        "amount": 42,
    }
    said = [(e.role, e.content) for e in evs if isinstance(e, MessageEvent)]
    assert said[-1] == ("assistant", f"Charged: {observation.content}")
    ledger = [r.kind for r in records(hosted_settings, EFFECTS, cid)]
    assert ledger == ["effect_proposed", "effect_started", "effect_confirmed"]  # the lookup's confirmation


@pytest.mark.slow_on("apache")
@pytest.mark.parametrize(
    ("graph", "how"),
    [
        ("make_agent", "timeout"),  # the tool raised OutcomeUnknownError after the provider charged
        pytest.param("make_tool_node", "killed", marks=pytest.mark.slow),  # SIGKILLed after the charge
    ],
)
def test_a_hosted_tool_call_of_unknown_outcome_waits_in_the_human_queue_then_finishes(
    hosted_settings: Settings, tmp_path: Path, graph: str, how: str
) -> None:
    """No lookup, an irreversible charge whose outcome is unknown: an `EffectUnknown` on the
    ledger (the API's and the console's human queue), the thread waiting for a human; the queue's
    decision (a `resolve` inbox record, as `POST /operations/{id}/resolve` sends) finishes it."""
    env = {"CRASH_NO_LOOKUP": "1"}
    if how == "killed":
        cid = killed_after_the_charge(hosted_settings, tmp_path, graph, **env)
    else:
        cid = f"shop-{uuid.uuid4().hex[:8]}"
        send(hosted_settings, cid, "two tickets, please")
        run_to_idle(hosted_settings, tmp_path, graph, CRASH_TIMEOUT="1", **env)
    assert final_status(hosted_settings, cid) == "waiting_for_human"
    unknown = [r for r in records(hosted_settings, EFFECTS, cid) if r.kind == "effect_unknown"]
    assert len(unknown) == 1 and unknown[0].operation_id.endswith(":call-1")
    proposed = next(r for r in records(hosted_settings, EFFECTS, cid) if r.kind == "effect_proposed")
    assert proposed.tool_name == "charge_card" and proposed.effect_class == "irreversible"
    assert len(charges(tmp_path)) == 1

    operation_id = unknown[0].operation_id
    send(hosted_settings, cid, "confirmed", command="resolve", sender="human:t1", operation_id=operation_id)
    run_to_idle(hosted_settings, tmp_path, graph, **env)
    assert final_status(hosted_settings, cid) == "finished"
    assert len(charges(tmp_path)) == 1
    kinds = [r.kind for r in records(hosted_settings, EFFECTS, cid) if r.operation_id == operation_id]
    assert kinds[-2:] == ["effect_confirmed", "effect_resolved"]
    said = [e.content for e in events(hosted_settings, cid) if isinstance(e, MessageEvent)]
    assert said[-1] == "Charged: done (confirmed without a recorded result)"


def test_tool_effects_covers_only_the_tools_it_names() -> None:
    effects = ToolEffects({"charge_card": "irreversible", "search": "read_only"}, lookup=lambda _name: None)
    assert effects.effect_class("charge_card") == "irreversible"
    assert effects.effect_class("search") is None and effects.effect_class("other") is None
    assert ToolEffects("keyed").effect_class("anything") == "keyed"
