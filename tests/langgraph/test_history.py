"""History commands on a hosted graph's thread, through the API, a runner and the real consumers.

A fleet runner (in this process, in a thread) hosts `chat_graph`; the real consumers (views,
index, stats, titles, effects) feed the API's store. A `branch` posted to the API forks the graph
from the checkpoint that produced the event (LangGraph's `__copy__`), which is a convdb branch:
the API's active branch is the graph's new lineage, the old lineage is still a branch of the
tree (what the console's branches page lists). A `fork` copies the thread into a new
conversation that the runner then runs from the checkpoint of the fork point; `pause` keeps the
graph from running until `resume`. Nothing is written twice.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from convdb.consumers.console.branches import branch_tree
from convdb.consumers.store import open_engine
from convdb.infra.dlq import ERROR_MESSAGE
from convdb.infra.kafka import apply_topics
from convdb.infra.partitioner import partition_for
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.producers.fleet.runner import FleetRunner
from convdb.producers.fleet.service import build_context
from convdb.schemas import ForkEvent, LLMUsageEvent, MessageEvent, StateUpdateEvent
from convdb.schemas.topics import DLQ
from tests.conftest import wait_until
from tests.langgraph.test_hosted import KEY, answered, read_side
from tests.producers._support import direct, events

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]

GRAPH_REF = "tests.langgraph.chat_graph:make"


@pytest.fixture
def api_settings(make_settings: Callable[..., Settings], tmp_path: Path) -> Settings:
    settings = direct(
        make_settings(
            namespace=f"h{uuid.uuid4().hex[:10]}",
            store_url=f"sqlite:///{tmp_path / 'store.db'}",
            api={"keys": {"key-t1": "t1"}},
        )
    )
    apply_topics(settings)
    return settings


@contextlib.contextmanager
def hosting(settings: Settings, work: Path, graph: str = GRAPH_REF) -> Iterator[FleetRunner]:
    """A fleet runner hosting `graph`, serving in a thread until the block ends."""
    (work / "ws").mkdir(exist_ok=True)
    store = work / f"runner-{uuid.uuid4().hex[:6]}.sqlite"  # a new runner: it restores from the log
    ctx = build_context(settings, work / "ws", None, None, store=store, graph=graph)
    runner = FleetRunner(ctx)
    stop = threading.Event()
    thread = threading.Thread(target=runner.serve, args=(lambda _: stop.is_set(),), daemon=True)
    thread.start()
    try:
        yield runner
    finally:
        stop.set()
        thread.join(60)
        ctx.store.close()


def said(client: TestClient, cid: str) -> list[str]:
    """The messages of the API's active branch."""
    view = client.get(f"/conversations/{cid}/view", headers=KEY).json()
    return [e["content"] for e in view.get("events", ()) if e["kind"] == "message"]


def saying(client: TestClient, cid: str, wanted: list[str]) -> None:
    """Wait until the active branch's messages are `wanted` and the run has stopped."""
    answered(client, f"/conversations/{cid}", lambda b: b["execution_status"] in ("finished", "paused"))
    wait_until(lambda: said(client, cid) == wanted, 60, f"{cid} says {wanted} (it says {said(client, cid)})")


def seq_of(client: TestClient, cid: str, content: str) -> int:
    view = client.get(f"/conversations/{cid}/view", headers=KEY).json()
    return next(e["seq"] for e in view["events"] if e["kind"] == "message" and e["content"] == content)


def post(client: TestClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body, headers=KEY)
    assert response.status_code == 202, response.text
    return response.json()  # type: ignore[no-any-return]


def no_duplicates(settings: Settings, cid: str) -> list[Any]:
    """The conversation's events, checked: every id and seq once, every user message once."""
    log = events(settings, cid)
    assert len({e.id for e in log}) == len(log) and [e.seq for e in log] == list(range(1, len(log) + 1))
    texts = [e.content for e in log if isinstance(e, MessageEvent) and e.role == "user"]
    assert len(texts) == len(set(texts)), texts
    return log


def test_a_branch_at_an_old_answer_forks_the_graph_and_is_the_active_branch(
    api_settings: Settings, tmp_path: Path
) -> None:
    """Each step with a runner of its own (each restores the thread from the log): two turns; a
    branch at the first answer and a turn on it; a branch at the system prompt, refused; a turn."""
    settings = api_settings
    with read_side(settings) as client:
        with hosting(settings, tmp_path):
            cid = post(client, "/conversations", {"content": "one"})["conversation_id"]
            saying(client, cid, ["one", "echo one (turn 1)"])
            post(client, f"/conversations/{cid}/messages", {"content": "two"})
            saying(client, cid, ["one", "echo one (turn 1)", "two", "echo two (turn 2)"])

        with hosting(settings, tmp_path):
            post(client, f"/conversations/{cid}/branch", {"at_seq": seq_of(client, cid, "echo one (turn 1)")})
            saying(client, cid, ["one", "echo one (turn 1)"])
            post(client, f"/conversations/{cid}/messages", {"content": "three"})
            # The graph went on from the first answer's checkpoint: its turn count is that lineage's.
            saying(client, cid, ["one", "echo one (turn 1)", "three", "echo three (turn 2)"])
            summary = answered(client, f"/conversations/{cid}", lambda b: b["execution_status"] == "finished")
            assert summary["title"] == "one"
            post(client, f"/conversations/{cid}/branch", {"at_seq": 1})  # the system prompt: no checkpoint
            wait_until(lambda: refusals(settings, cid), 60, "the branch at the prompt is dead-lettered")
            assert "no message of its graph is at or before it" in refusals(settings, cid)[0]

        with open_engine(settings.store_url, writer=False).connect() as conn:
            branches, _, _ = branch_tree(conn, "t1", cid, None)
        labels = sorted(b.label for b in branches)
        assert len(branches) == 2 and branches[0].active, labels
        assert any("echo two (turn 2)" in label for label in labels)  # the old lineage is still a branch
        assert "echo three (turn 2)" in branches[0].label

        with hosting(settings, tmp_path):
            post(client, f"/conversations/{cid}/messages", {"content": "four"})
            after = ["one", "echo one (turn 1)", "three", "echo three (turn 2)", "four", "echo four (turn 3)"]
            saying(client, cid, after)
            # A branch at a user message: the graph takes it in again and answers it anew.
            post(client, f"/conversations/{cid}/branch", {"at_seq": seq_of(client, cid, "three")})
            wait_until(lambda: answers(settings, cid).count("echo three (turn 2)") == 2, 60, "answered anew")
            saying(client, cid, after[:4])
    log = no_duplicates(settings, cid)
    assert len([e for e in log if isinstance(e, LLMUsageEvent)]) == 5
    assert [e.kind for e in log].count("active_leaf_changed") == 2


def answers(settings: Settings, cid: str) -> list[str]:
    return [e.content for e in events(settings, cid) if isinstance(e, MessageEvent) and e.role == "assistant"]


def elsewhere(settings: Settings, cid: str) -> str:
    """A new conversation id on another partition than `cid`'s (its runner reads the source's
    graph records from that partition, never writing there)."""
    for _ in range(1000):
        new = f"fork-{uuid.uuid4().hex[:8]}"
        if settings.partitions == 1 or partition_for(new, settings.partitions) != partition_for(
            cid, settings.partitions
        ):
            return new
    raise AssertionError("no id found on another partition")


def refusals(settings: Settings, cid: str) -> list[str]:
    """The reasons of the dead letters of the conversation's inbox records."""
    found = []
    for msg in read_topic(settings, DLQ.name(settings.namespace)):
        if (msg.key() or b"").decode() == cid:
            headers = dict(msg.headers() or [])
            found.append(headers[ERROR_MESSAGE].decode())
    return found


def test_a_fork_copies_the_thread_into_a_new_conversation_that_runs_and_a_pause_holds_it(
    api_settings: Settings, tmp_path: Path
) -> None:
    settings = api_settings
    with read_side(settings) as client, hosting(settings, tmp_path):
        cid = post(client, "/conversations", {"content": "one"})["conversation_id"]
        saying(client, cid, ["one", "echo one (turn 1)"])
        post(client, f"/conversations/{cid}/messages", {"content": "two"})
        saying(client, cid, ["one", "echo one (turn 1)", "two", "echo two (turn 2)"])

        new = elsewhere(settings, cid)
        at = seq_of(client, cid, "echo one (turn 1)")
        post(client, f"/conversations/{cid}/fork", {"at_seq": at, "new_conversation_id": new})
        answered(client, f"/conversations/{new}", lambda b: b["execution_status"] in ("finished", "idle"))
        post(client, f"/conversations/{new}/messages", {"content": "four"})
        saying(client, new, ["four", "echo four (turn 2)"])  # its graph holds turn 1, not turn 2

        post(client, f"/conversations/{new}/pause", {})
        answered(client, f"/conversations/{new}", lambda b: b["execution_status"] == "paused")
        post(client, f"/conversations/{new}/messages", {"content": "five"})
        wait_until(lambda: "five" in said(client, new), 60, "the message is in the log")
        post(client, f"/conversations/{new}/resume", {})
        saying(client, new, ["four", "echo four (turn 2)", "five", "echo five (turn 3)"])
        assert said(client, cid) == ["one", "echo one (turn 1)", "two", "echo two (turn 2)"]
    log = no_duplicates(settings, new)
    assert isinstance(log[0], ForkEvent) and log[0].source_conversation_id == cid
    assert [e.content for e in log if isinstance(e, MessageEvent)] == [
        "four",
        "echo four (turn 2)",
        "five",
        "echo five (turn 3)",
    ]
    statuses = [(e.seq, e.execution_status, e.reason) for e in log if isinstance(e, StateUpdateEvent)]
    resumed = next(seq for seq, status, reason in statuses if reason.startswith("resumed by"))
    paused = next(seq for seq, status, _ in statuses if status == "paused")
    five = next(e for e in log if isinstance(e, MessageEvent) and e.content == "echo five (turn 3)")
    assert paused < resumed < five.seq  # the message sent while paused was answered after the resume
    no_duplicates(settings, cid)


@pytest.mark.slow_on("apache")
def test_a_branch_while_the_graph_waits_in_an_interrupt_is_refused_and_a_cancel_ends_it(
    api_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash demo's graph stops in its approval `interrupt()`; a branch then would leave that
    operation open in the human queue for ever: it is dead-lettered with the reason. A cancel then
    ends the run (status `error`, `cancelled by ...`) without invoking the graph again."""
    settings = api_settings
    monkeypatch.setenv("CRASH_WORK", str(tmp_path))
    monkeypatch.setenv("HOSTED_APPROVAL", "1")
    with read_side(settings) as client, hosting(settings, tmp_path, "tests.langgraph.hosted_graph:make"):
        cid = post(client, "/conversations", {"content": "two tickets, please"})["conversation_id"]
        answered(client, f"/conversations/{cid}", lambda b: b["execution_status"] == "waiting_for_human")
        post(client, f"/conversations/{cid}/branch", {"at_seq": seq_of(client, cid, "two tickets, please")})
        wait_until(lambda: refusals(settings, cid), 60, "the branch is dead-lettered")
        post(client, f"/conversations/{cid}/cancel", {})
        answered(client, f"/conversations/{cid}", lambda b: b["execution_status"] == "error")
    assert "waits in interrupt() for an answer" in refusals(settings, cid)[0]
    log = events(settings, cid)
    assert [e.kind for e in log].count("active_leaf_changed") == 0
    updates = [e for e in log if isinstance(e, StateUpdateEvent)]
    statuses = [e.execution_status for e in updates]
    assert statuses[-1] == "error" and updates[-1].reason.startswith("cancelled by"), updates[-1]
    assert "running" not in statuses[statuses.index("waiting_for_human") :]  # the graph never ran again
