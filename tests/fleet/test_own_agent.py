"""A user's agent and tools, installed as a package outside convdb, under `convdb runner` processes.

The package (`tests/fleet/own_agent_pkg.py`) is written into a temp dir with a dist-info, so the
runners find its `convdb.agents` entry points through importlib.metadata. Runners are started
without `--agent`: the inbox message names the agent, the conversation records it, and the
runner that resumes after a SIGKILL loads it from that record.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from convdb.infra.dlq import ERROR_CLASS, ERROR_MESSAGE
from convdb.infra.kafka import apply_topics
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.schemas import (
    ActionEvent,
    AgentErrorEvent,
    EffectUnknown,
    ObservationEvent,
    SystemPromptEvent,
)
from convdb.schemas.topics import DLQ, EFFECTS, EVENTS
from tests.fleet import own_agent_pkg
from tests.producers._support import direct, events, final_status, records, runner_cmd, send, start

pytestmark = pytest.mark.kafka

TASK = '!charge {"customer": "ann", "cents": 500}\n+send_sms {"to": "ann", "text": "paid"}'
CHARGE_POINTS = ("after_effect_proposed", "after_effect_started", "after_provider_call", "after_observation")
FAST_POINTS = {
    # The default run splits the points between the brokers; `slow` runs every point on both.
    "embedded": ("after_effect_started", "after_provider_call"),
    "apache": ("after_effect_proposed", "after_observation"),
}


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The installed user package: the environment a runner process needs to load it."""
    root = own_agent_pkg.install(tmp_path_factory.mktemp("site"))
    db = root / "provider.sqlite"
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "SHOPKIT_DB": str(db)}


def provider(env: dict[str, str], sql: str) -> list[tuple[Any, ...]]:
    """Rows of the provider's own records (its SQLite file)."""
    with sqlite3.connect(env["SHOPKIT_DB"]) as db:
        return db.execute(sql).fetchall()


def counts(env: dict[str, str], table: str, key: str) -> int:
    """How often the provider acted for one operation id."""
    return provider(env, f"SELECT COUNT(*) FROM {table} WHERE key = '{key}'")[0][0]  # noqa: S608


def crash_cases(
    make_settings: Callable[..., Settings], env: dict[str, str], workspace: Path, cases: list[tuple[str, str]]
) -> dict[tuple[str, str], tuple[str, Settings, str | None]]:
    """Per (tool, point): a runner dies there (SIGKILL), then a new runner resumes. Concurrently."""
    setup = {}
    for tool, point in cases:
        settings = direct(make_settings(namespace=f"t{uuid.uuid4().hex[:10]}"), action_concurrency=1)
        apply_topics(settings)
        cid = f"own-{point}-{uuid.uuid4().hex[:6]}"
        send(settings, cid, TASK, agent="shop")
        setup[(tool, point)] = (cid, settings)
    crashing = {
        case: start(
            runner_cmd(workspace, idle_exit=60), s, CONVDB_CRASH_AT=case[1], CONVDB_CRASH_TOOL=case[0], **env
        )
        for case, (_, s) in setup.items()
    }
    for case, proc in crashing.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, f"{case}: rc {proc.returncode}\n{err[-2000:]}"
    resuming = {case: start(runner_cmd(workspace, idle_exit=2), s, **env) for case, (_, s) in setup.items()}
    out = {}
    for case, proc in resuming.items():
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{case}: resume rc {proc.returncode}\n{err[-3000:]}"
        cid, settings = setup[case]
        out[case] = (cid, settings, final_status(settings, cid))
    return out


def _crash_points(broker: str, everything: bool) -> list[tuple[str, str]]:
    points = CHARGE_POINTS if everything else FAST_POINTS[broker]
    return [*(("charge", p) for p in points), ("send_sms", "after_provider_call")]


def run_crash_matrix(
    request: pytest.FixtureRequest,
    make_settings: Callable[..., Settings],
    package: dict[str, str],
    tmp_path: Path,
    everything: bool,
) -> None:
    broker = request.node.callspec.params["broker"]
    results = crash_cases(make_settings, package, tmp_path, _crash_points(broker, everything))
    for (tool, point), (cid, settings, final) in results.items():
        evs = events(settings, cid)
        prompt = next(e for e in evs if isinstance(e, SystemPromptEvent))
        assert (prompt.agent, prompt.tools) == ("shop", ("charge", "send_sms", "slow_fax"))
        ops = {e.tool_name: e.operation_id for e in evs if isinstance(e, ActionEvent)}
        # The provider's own count: the charge made once, by one call with its key; never a blind retry.
        assert counts(package, "charges", ops["charge"]) == 1, (tool, point)
        assert counts(package, "calls", ops["charge"]) == 1, (tool, point)
        unknown = [r.operation_id for r in records(settings, EFFECTS, cid) if isinstance(r, EffectUnknown)]
        if tool == "send_sms":
            # Irreversible without a lookup, killed after the gateway acted: nobody can tell, a human decides.
            assert final == "waiting_for_human", (tool, point, final)
            assert unknown == [ops["send_sms"]]
            assert counts(package, "sms", ops["send_sms"]) == 1
            observed = {e.action_id for e in evs if isinstance(e, ObservationEvent)}
            assert [a for a in evs if isinstance(a, ActionEvent) and a.id not in observed] == [
                a for a in evs if isinstance(a, ActionEvent) and a.tool_name == "send_sms"
            ]
        else:
            assert final == "finished", (tool, point, final)
            assert not unknown
            assert counts(package, "sms", ops["send_sms"]) == 1
            observed = [e.action_id for e in evs if isinstance(e, ObservationEvent)]
            assert sorted(observed) == sorted(e.id for e in evs if isinstance(e, ActionEvent))


@pytest.mark.brokers
def test_users_keyed_tool_survives_a_kill_at_each_crash_point(
    request: pytest.FixtureRequest,
    make_settings: Callable[..., Settings],
    package: dict[str, str],
    tmp_path: Path,
) -> None:
    run_crash_matrix(request, make_settings, package, tmp_path, everything=False)


@pytest.mark.slow
@pytest.mark.brokers
def test_users_keyed_tool_survives_a_kill_at_every_crash_point(
    request: pytest.FixtureRequest,
    make_settings: Callable[..., Settings],
    package: dict[str, str],
    tmp_path: Path,
) -> None:
    run_crash_matrix(request, make_settings, package, tmp_path, everything=True)


def dead_letters(settings: Settings) -> dict[str, tuple[str, str]]:
    """Conversation id -> (error class, reason) of each dead-lettered inbox record."""
    out = {}
    for msg in read_topic(settings, DLQ.name(settings.namespace)):
        headers = dict(msg.headers() or [])
        out[msg.key().decode()] = (headers[ERROR_CLASS].decode(), headers[ERROR_MESSAGE].decode())
    return out


def test_bad_agents_and_tools_have_their_outcome_and_the_runner_goes_on(
    make_settings: Callable[..., Settings], package: dict[str, str], tmp_path: Path
) -> None:
    settings = direct(make_settings(namespace=f"t{uuid.uuid4().hex[:10]}"), action_concurrency=1)
    apply_topics(settings)
    n = uuid.uuid4().hex[:6]
    cid = {k: f"{k}-{n}" for k in ("unknown", "reference", "raises", "badargs", "hangs", "ok", "builtin")}
    send(settings, cid["unknown"], "hi", agent="no-such-agent")
    send(settings, cid["reference"], "hi", agent="shopkit.agent:broken")  # importable, never imported
    send(settings, cid["raises"], "hi", agent="broken")
    send(settings, cid["badargs"], '!charge {"customer": "bob", "cents": "lots"}', agent="shop")
    send(settings, cid["hangs"], '!slow_fax {"to": "0123"}', agent="shop")
    send(settings, cid["ok"], '!charge {"customer": "cy", "cents": 1}', agent="shop")
    send(settings, cid["ok"], "and now with another agent", agent="default")
    send(settings, cid["builtin"], '!write_file {"path": "b.txt", "content": "x"}')
    workspace = tmp_path / "ws"
    proc = start(runner_cmd(workspace, idle_exit=2), settings, **package)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]  # it served every conversation, then went idle

    letters = dead_letters(settings)
    assert set(letters) == {cid["unknown"], cid["reference"], cid["raises"], cid["ok"]}
    assert letters[cid["unknown"]][0] == "UnknownAgentError"
    assert (
        "unknown agent 'no-such-agent'" in letters[cid["unknown"]][1] and "shop" in letters[cid["unknown"]][1]
    )
    assert letters[cid["reference"]][0] == "UnknownAgentError"
    assert "module:attr is only for a runner's own --agent" in letters[cid["reference"]][1]
    assert letters[cid["raises"]] == (
        "AgentLoadError",
        "agent 'broken' (shopkit.agent:broken): its factory raised RuntimeError: "
        "the shop's API key is not set",
    )
    assert letters[cid["ok"]][0] == "AgentMismatchError"
    assert "runs agent 'shop', not 'default'" in letters[cid["ok"]][1]
    assert not any(events(settings, cid[k]) for k in ("unknown", "reference", "raises"))

    # Arguments the tool's model rejects: an AgentErrorEvent the LLM reads; the provider never called.
    errors = [e for e in events(settings, cid["badargs"]) if isinstance(e, AgentErrorEvent)]
    assert len(errors) == 1 and "cents: Input should be a valid integer" in errors[0].error
    assert final_status(settings, cid["badargs"]) == "finished"
    assert provider(package, "SELECT COUNT(*) FROM charges WHERE customer = 'bob'") == [(0,)]

    # A tool that hangs past its timeout: outcome unknown; irreversible without lookup, so a human decides.
    assert final_status(settings, cid["hangs"]) == "waiting_for_human"
    (unknown,) = [r for r in records(settings, EFFECTS, cid["hangs"]) if isinstance(r, EffectUnknown)]
    assert "no answer within 1s" in unknown.reason

    assert final_status(settings, cid["ok"]) == "finished"
    assert provider(package, "SELECT COUNT(*) FROM charges WHERE customer = 'cy'") == [(1,)]
    ok_events = len(events(settings, cid["ok"]))
    builtin = events(settings, cid["builtin"])
    assert next(e for e in builtin if isinstance(e, SystemPromptEvent)).agent == "default"
    assert final_status(settings, cid["builtin"]) == "finished" and (workspace / "b.txt").read_text() == "x"
    assert {e.conversation_id for e in records(settings, EVENTS)} == {
        cid[k] for k in ("badargs", "hangs", "ok", "builtin")
    }

    # A runner without the package: the restored conversation of `shop` is kept but not run; its
    # new message goes to the DLQ with the reason, and the built-in agent's conversation goes on.
    send(settings, cid["ok"], "one more thing")
    send(settings, cid["builtin"], '!write_file {"path": "c.txt", "content": "y"}')
    bare = {k: v for k, v in package.items() if k != "PYTHONPATH"}
    proc = start(runner_cmd(workspace, idle_exit=2), settings, **bare)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    error, reason = dead_letters(settings)[cid["ok"]]
    assert error == "AgentLoadError" and "unknown agent 'shop'" in reason, reason
    assert final_status(settings, cid["ok"]) == "finished"
    assert len(events(settings, cid["ok"])) == ok_events
    assert (workspace / "c.txt").read_text() == "y"
    assert final_status(settings, cid["builtin"]) == "finished"
