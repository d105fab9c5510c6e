"""Hosted mode: the crash demo's graph run by `convdb runner --graph`, its runner SIGKILLed mid-step.

The thread is a conversation: the user's message goes to its inbox, the runner owning the
partition invokes the graph, its checkpoints, task writes and ledger records go through the
partition's fenced transactional writer. A runner is killed where `slow` charges the card (before
the provider call, after it, after the charge was confirmed but before the node's writes were
saved); a second runner takes the partition over and finishes the graph: the card is charged once
(LangGraph's SqliteSaver charges twice: `test_crash.test_sqlite_saver_charges_twice`). The
`messages` channel shows as convdb events (user message, the graph's answer, its usage).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from convdb.consumers.api import create_app
from convdb.consumers.effects.projector import EffectsConsumer
from convdb.consumers.index import IndexConsumer
from convdb.consumers.runner import Runner
from convdb.consumers.stats import StatsConsumer
from convdb.consumers.titles import TitlesConsumer
from convdb.consumers.views import ViewsConsumer
from convdb.infra.kafka import apply_topics
from convdb.infra.settings import Settings
from convdb.producers.fleet.runner import FleetRunner, serve_until
from convdb.producers.fleet.service import build_context
from convdb.schemas import LLMUsageEvent, MessageEvent, SystemPromptEvent
from convdb.schemas.topics import EFFECTS, GRAPH
from tests.conftest import wait_until
from tests.producers._support import direct, events, final_status, records, runner_cmd, send, start

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]

GRAPH_REF = "tests.langgraph.hosted_graph:make"
KEY = {"X-API-Key": "key-t1"}


def runner(settings: Settings, work: Path, idle_exit: float, **env: str) -> subprocess.Popen[str]:
    argv = [*runner_cmd(work / "workspace", idle_exit=idle_exit), "--graph", GRAPH_REF]
    return start(argv, settings, CRASH_WORK=str(work), **env)


def killed_then_resumed(settings: Settings, work: Path, crash_at: str, **env: str) -> str:
    """A message; a runner SIGKILLed where it paused at `crash_at`; a second runner resumes.
    Returns the conversation id."""
    cid = f"order-{uuid.uuid4().hex[:8]}"
    send(settings, cid, "two tickets, please")
    first = runner(settings, work, 60, CRASH_AT=crash_at, **env)
    try:
        wait_until(lambda: (work / "paused").exists() or first.poll() is not None, timeout=90)
        assert first.poll() is None, first.communicate()[1][-3000:]
        first.send_signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate()
    second = runner(settings, work, 3, **env)
    _, err = second.communicate(timeout=180)
    assert second.returncode == 0, err[-3000:]
    return cid


def charges(work: Path) -> list[str]:
    return (work / "provider.log").read_text().splitlines()


@pytest.fixture
def hosted_settings(make_settings: object) -> Settings:
    settings = direct(make_settings(namespace=f"g{uuid.uuid4().hex[:10]}"))  # type: ignore[operator]
    apply_topics(settings)
    return settings


@pytest.mark.parametrize(
    "crash_at",
    [
        # One kill point by default (about 15 s per broker of runner start-ups and takeovers);
        # the other two under -m slow.
        pytest.param("before_call", marks=pytest.mark.slow),
        "after_call",
        pytest.param("after_confirmed", marks=pytest.mark.slow),
    ],
)
def test_a_hosted_graph_charges_once_whatever_the_kill_point(
    hosted_settings: Settings, tmp_path: Path, crash_at: str
) -> None:
    cid = killed_then_resumed(hosted_settings, tmp_path, crash_at)
    assert len(charges(tmp_path)) == 1, charges(tmp_path)
    assert final_status(hosted_settings, cid) == "finished"
    evs = events(hosted_settings, cid)
    prompt = next(e for e in evs if isinstance(e, SystemPromptEvent))
    assert prompt.agent == GRAPH_REF
    said = [(e.role, e.content) for e in evs if isinstance(e, MessageEvent)]
    assert said == [("user", "two tickets, please"), ("assistant", "Charged ch-1 for: two tickets, please")]
    usage = [e for e in evs if isinstance(e, LLMUsageEvent)]
    assert [(u.model, u.prompt_tokens, u.completion_tokens) for u in usage] == [("scripted-checkout", 12, 5)]
    graph_records = records(hosted_settings, GRAPH, cid)
    assert graph_records and all(r.conversation_id == cid for r in graph_records)


@pytest.mark.slow_on("apache")
def test_an_inbox_resume_answers_the_graphs_own_interrupt(
    hosted_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner in this process (`convdb run`'s way): the graph stops in its approval `interrupt()`
    (status waiting_for_human, the interrupt an unknown operation on the ledger); a `resume` inbox
    record whose content is the answer resumes it, and the operation is settled."""
    monkeypatch.setenv("CRASH_WORK", str(tmp_path))
    monkeypatch.setenv("HOSTED_APPROVAL", "1")
    cid = f"order-{uuid.uuid4().hex[:8]}"
    send(hosted_settings, cid, "two tickets, please")
    (tmp_path / "ws").mkdir()
    ctx = build_context(
        hosted_settings, tmp_path / "ws", None, None, store=tmp_path / "s.sqlite", graph=GRAPH_REF
    )

    def stopped_in(status: str) -> Callable[[FleetRunner], bool]:
        def done(runner: FleetRunner) -> bool:
            conv = runner.conversations().get(cid)
            return runner.idle and conv is not None and conv.status == status

        return done

    serve_until(ctx, stopped_in("waiting_for_human"), 90)
    waiting = [
        r for r in records(hosted_settings, EFFECTS, cid) if r.operation_id.startswith(f"{cid}/interrupt:")
    ]
    assert [r.kind for r in waiting] == ["effect_proposed", "effect_started", "effect_unknown"]
    assert "ship the tickets?" in waiting[-1].evidence

    send(hosted_settings, cid, '{"decision": "confirmed", "by": "ops"}', command="resume", sender="ops")
    serve_until(ctx, stopped_in("finished"), 90)
    ctx.store.close()
    said = [e.content for e in events(hosted_settings, cid) if isinstance(e, MessageEvent)]
    assert said[-1] == "Charged ch-1 for: two tickets, please (confirmed by ops)"
    settled = [
        r.kind for r in records(hosted_settings, EFFECTS, cid) if r.operation_id == waiting[0].operation_id
    ]
    assert settled[3:] == ["effect_confirmed", "effect_resolved"]
    assert len(charges(tmp_path)) == 1


@pytest.mark.slow
def test_a_zombie_runner_wakes_after_the_takeover_and_is_fenced_before_the_provider(
    hosted_settings: Settings, tmp_path: Path
) -> None:
    """A runner freezes (SIGSTOP) in `slow`, before the charge; its session expires, a second runner
    takes the partition over and finishes the graph with one charge; the first wakes and goes on
    with its step: its `EffectStarted` write through the partition's writer is fenced, so it never
    calls the provider, and it drops the partition."""
    cid = f"order-{uuid.uuid4().hex[:8]}"
    send(hosted_settings, cid, "two tickets, please")
    zombie = runner(hosted_settings, tmp_path, 5, CRASH_AT="before_effect", CRASH_SIGNAL="SIGSTOP")
    try:
        wait_until(lambda: (tmp_path / "paused").exists() or zombie.poll() is not None, timeout=90)
        assert zombie.poll() is None, zombie.communicate()[1][-3000:]
        owner = runner(hosted_settings, tmp_path, 0)  # waits for the zombie's session to expire
        try:
            wait_until(
                lambda: final_status(hosted_settings, cid) == "finished", 120, "the new owner finishes"
            )
        finally:
            owner.terminate()
            owner.communicate(timeout=60)
        assert len(charges(tmp_path)) == 1
        zombie.send_signal(signal.SIGCONT)
        out, err = zombie.communicate(timeout=120)
    finally:
        if zombie.poll() is None:
            zombie.kill()
            zombie.communicate()
    status = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    # Its commit is refused: librdkafka reports the fence as such (embedded broker), or, on Apache
    # Kafka, at times as a fatal error that the next commit call reports as a conflict: a failed
    # write either way, and the partition is no longer the zombie's to rebuild.
    refused = [s for s in status if s["event"] in ("fenced", "write_failed")]
    assert len(refused) == 1, err[-3000:]
    assert "FENCED: partition" in err or "fenced by a newer instance" in err
    assert len(charges(tmp_path)) == 1  # the zombie never reached the provider
    assert final_status(hosted_settings, cid) == "finished"


@contextlib.contextmanager
def read_side(settings: Settings) -> Iterator[TestClient]:
    """The real consumers (views, index, stats, titles, effects) running over the namespace, and
    the API over their store."""
    runner = Runner(
        settings,
        [
            ViewsConsumer(settings),
            IndexConsumer(settings),
            StatsConsumer(settings),
            TitlesConsumer(settings),
            EffectsConsumer(settings),
        ],
        name="hosted-graph-test",
    )
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        with TestClient(create_app(settings)) as client:
            yield client
    finally:
        runner.stop()
        thread.join(30)


def answered(client: TestClient, path: str, check: Callable[[Any], bool]) -> Any:
    """The API's JSON answer to GET `path` once `check` holds for it (the consumers caught up)."""
    found: list[Any] = []

    def ready() -> bool:
        response = client.get(path, headers=KEY)
        found[:] = [response.json()] if response.status_code == 200 else []
        return bool(found) and check(found[0])

    wait_until(ready, 60, f"GET {path}")
    return found[0]


@pytest.mark.slow_on("apache")
def test_a_hosted_thread_reads_as_a_conversation_and_a_human_decides_its_interrupts_through_the_api(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """Killed after the charge with no lookup: the `@effect` call's `interrupt()` waits in the
    human queue (the API's unknown operations, the console's queue) and the thread has a title;
    the decision posted there resumes the graph with `Command(resume=...)`. Then the graph's own
    `interrupt()` (an approval) waits there too, and its decision finishes the graph."""
    settings = direct(
        make_settings(
            namespace=f"g{uuid.uuid4().hex[:10]}",
            store_url=f"sqlite:///{tmp_path / 'store.db'}",
            api={"keys": {"key-t1": "t1"}},
        )
    )
    apply_topics(settings)
    env = {"CRASH_NO_LOOKUP": "1", "HOSTED_APPROVAL": "1"}
    cid = killed_then_resumed(settings, tmp_path, "after_call", **env)
    assert len(charges(tmp_path)) == 1
    assert final_status(settings, cid) == "waiting_for_human"

    def decide_first_unknown(kind: str) -> dict[str, Any]:
        queue = answered(
            client,
            f"/operations?status=unknown&conversation_id={cid}",
            lambda b: any(o["operation_id"].startswith(f"{cid}/{kind}") for o in b["operations"]),
        )
        (operation,) = queue["operations"]
        decided = client.post(
            f"/operations/{operation['operation_id']}/resolve", json={"decision": "confirmed"}, headers=KEY
        )
        assert decided.status_code == 202, decided.text
        decider = runner(settings, tmp_path, 3, **env)
        _, err = decider.communicate(timeout=180)
        assert decider.returncode == 0, err[-3000:]
        return operation  # type: ignore[no-any-return]

    with read_side(settings) as client:
        summary = answered(
            client, f"/conversations/{cid}", lambda b: b["execution_status"] == "waiting_for_human"
        )
        assert summary["title"] == "two tickets, please"
        charge = decide_first_unknown("")
        assert charge["intent"]["tool"] == "charge_card"
        approval = decide_first_unknown("interrupt:")
        assert approval["intent"]["tool"] == "interrupt" and "ship the tickets?" in json.dumps(approval)
        answered(client, f"/conversations/{cid}", lambda b: b["execution_status"] == "finished")
        answered(client, f"/operations?status=unknown&conversation_id={cid}", lambda b: not b["operations"])
        view = client.get(f"/conversations/{cid}/view", headers=KEY).json()
    said = [(e["role"], e["content"]) for e in view["events"] if e["kind"] == "message"]
    assert said == [
        ("user", "two tickets, please"),
        ("assistant", "Charged confirmed-by-a-human for: two tickets, please (confirmed by human:t1)"),
    ]
    assert len(charges(tmp_path)) == 1
