"""Branches and forks through the inbox, carried out by the fleet runner that owns the conversation.

A real stack (runner, read side, API as child processes) on each broker kind (the default run
uses the embedded broker, `-m slow` Apache Kafka too, and the CLI's round trips): a fork is a new
conversation whose agent reads the source's path up to the fork point and then goes on alone; a
branch moves the active leaf back, so the next message starts a new branch, and the read side
(view, stats, titles) and the export follow. Commands the log refuses are dead-lettered with the
reason, each once, and the runner goes on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from convdb.consumers.archive import export
from convdb.infra.cli.main import main
from convdb.infra.dlq import ERROR_CLASS, ERROR_MESSAGE
from convdb.infra.kafka import apply_topics
from convdb.infra.partitioner import partition_for
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.schemas import ActiveLeafChangedEvent, ForkEvent, MessageEvent, make_codec
from convdb.schemas.topics import DLQ
from tests.conftest import wait_until
from tests.console.stack import Stack
from tests.producers._support import send

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]

KEY = {"X-API-Key": "demo-key"}
DONE = "Done: 1 step(s) completed."
TASK = 'Write the note.\n!write_file {"path": "note.txt", "content": "one"}'


@pytest.fixture(scope="module")
def stack(
    make_settings: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """Read side, API and one fleet runner."""
    settings = make_settings()
    apply_topics(settings)
    running = Stack(settings, tmp_path_factory.mktemp("branching")).start()
    try:
        running.start_runner("runner")
        yield running
    finally:
        running.close()


def post(stack: Stack, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(stack.url + path, json=body, headers=KEY, timeout=30)


def view(stack: Stack, cid: str) -> list[dict[str, Any]]:
    """The active branch the read side shows (empty while it does not know the conversation)."""
    try:
        return stack.api(f"/conversations/{cid}/view")["events"]  # type: ignore[no-any-return]
    except httpx.HTTPStatusError:
        return []


def texts(events: list[dict[str, Any]]) -> list[str]:
    return [e["content"] for e in events if e["kind"] == "message"]


def replied(stack: Stack, cid: str, text: str) -> list[dict[str, Any]]:
    """Wait until the active branch ends with an answer to the user message `text`."""

    def answered() -> list[dict[str, Any]] | None:
        events = view(stack, cid)
        said = texts(events)
        return events if len(said) >= 2 and said[-2] == text and events[-1]["kind"] != "message" else None

    return wait_until(answered, 90, f"{cid} to answer {text!r}", logs=stack.logs())


def seq_of(events: list[dict[str, Any]], text: str) -> int:
    return next(e["seq"] for e in events if e["kind"] == "message" and e["content"] == text)


@pytest.mark.slow_on("apache")  # broker-agnostic in its subject; about 45 s of CI per broker kind
def test_fork_continues_from_the_source_and_branch_starts_a_new_branch(stack: Stack) -> None:
    src = f"src-{uuid.uuid4().hex[:8]}"
    # A fork on another partition than its source: its runner reads the source from that
    # partition's snapshots and tail (the same-partition case reads it in memory).
    parts = stack.settings.partitions
    fork = next(
        f"fork-{i}-{src}"
        for i in range(100)
        if partition_for(f"fork-{i}-{src}", parts) != partition_for(src, parts)
    )
    stack.send(src, "demo", TASK)
    stack.wait_status(src, "finished")
    first = wait_until(
        lambda: [e for e in view(stack, src) if e["kind"] == "message"][1:], 60, "first answer"
    )
    done_at = seq_of(view(stack, src), first[-1]["content"])
    assert first[-1]["content"] == DONE
    stack.send(src, "demo", "second question")
    replied(stack, src, "second question")

    # Fork after the first answer: the new conversation starts with a ForkEvent pointing there.
    answer = post(stack, f"/conversations/{src}/fork", {"at_seq": done_at, "new_conversation_id": fork})
    assert answer.status_code == 202, answer.text
    assert answer.json()["conversation_id"] == fork
    (fork_event,) = wait_until(lambda: view(stack, fork), 60, "the fork's first event", logs=stack.logs())
    source_point = next(e for e in view(stack, src) if e["seq"] == done_at)
    assert fork_event["kind"] == "fork" and fork_event["seq"] == 1
    assert (fork_event["source_conversation_id"], fork_event["source_event_id"]) == (src, source_point["id"])
    # Its agent read the source's path up to there: the plan of the source's first message is done
    # (a conversation without that history would answer "Noted: and now?").
    assert post(stack, f"/conversations/{fork}/messages", {"content": "and now?"}).status_code == 202
    forked = replied(stack, fork, "and now?")
    assert texts(forked) == ["and now?", DONE]
    assert "second question" in texts(view(stack, src))  # the source goes on unchanged
    assert stack.api(f"/conversations/{fork}")["title"] == "and now?"

    # Branch the source at the same event: the next message starts a new branch from there.
    before = stack.api(f"/conversations/{src}")
    answer = post(stack, f"/conversations/{src}/branch", {"at_seq": done_at})
    assert answer.status_code == 202, answer.text
    wait_until(lambda: view(stack, src)[-1]["id"] == source_point["id"], 60, "the switch", logs=stack.logs())
    stack.send(src, "demo", "another question")
    branched = replied(stack, src, "another question")
    # The scripted model answers a message without directives by the plan it last saw: the first's.
    assert texts(branched)[-3:] == [DONE, "another question", DONE]
    assert "second question" not in texts(branched)
    after = stack.api(f"/conversations/{src}")
    assert after["title"] == before["title"] == TASK.splitlines()[0]
    assert after["view_length"] == len(branched) < after["events"]
    assert after["stats"]["events"] == after["events"] > before["events"] + 2
    assert after["stats"]["counts"]["active_leaf_changed"] == 1
    assert "Branches of this conversation" in console_page(stack, src)

    # The export holds both branches and the switch between them, seq gap-free.
    log = export.from_kafka(stack.settings, src, make_codec(None)).events
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    (switch,) = [e for e in log if isinstance(e, ActiveLeafChangedEvent)]
    assert switch.leaf_event_id == source_point["id"]
    said = [e.content for e in log if isinstance(e, MessageEvent)]
    assert said.index("second question") < said.index("another question")
    assert isinstance(export.from_kafka(stack.settings, fork, make_codec(None)).events[0], ForkEvent)

    # A branch switch is no event a branch can start from: the API says so before the runner.
    answer = post(stack, f"/conversations/{src}/branch", {"at_seq": switch.seq})
    assert answer.status_code == 400 and "is a branch switch" in answer.text


def console_page(stack: Stack, cid: str) -> str:
    """The console's page of a conversation, signed in with the demo key."""
    with httpx.Client(base_url=stack.url, timeout=30, follow_redirects=True) as client:
        login = client.get("/console/login").text
        token = login.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        client.post("/console/login", data={"api_key": "demo-key", "name": "t", "csrf": token})
        return client.get(f"/console/conversations/{cid}").text


def dead_letters(settings: Settings, keys: set[str]) -> list[dict[str, str]]:
    found = read_topic(settings, DLQ.name(settings.namespace))
    return [
        {k: (v or b"").decode() for k, v in m.headers() or []}
        for m in found
        if (m.key() or b"").decode() in keys
    ]


@pytest.mark.slow_on("apache")
def test_refused_commands_are_dead_lettered_with_the_reason(stack: Stack) -> None:
    """Sent straight to the inbox, past the API's checks: the runner is the final judge."""
    src, other = f"r-{uuid.uuid4().hex[:8]}", f"o-{uuid.uuid4().hex[:8]}"
    stack.send(src, "demo", "hello")
    stack.send(other, "other", "another tenant's")
    stack.wait_status(src, "finished")
    stack.wait_status(other, "finished", key="other-key")
    events_before = stack.api(f"/conversations/{src}")["events"]
    s = stack.settings
    absent = f"absent-{uuid.uuid4().hex[:8]}"
    taken = f"taken-{uuid.uuid4().hex[:8]}"
    refused = {
        "beyond the log": (src, "branch", {"at_seq": 99}, "there is no event #99"),
        "no seq": (src, "branch", {}, "no at_seq"),
        "no such conversation": (absent, "branch", {"at_seq": 1}, "no such conversation"),
        "target exists": (other, "fork", {"at_seq": 1, "source_conversation_id": src}, "already exists"),
        "into itself": (taken, "fork", {"at_seq": 1, "source_conversation_id": taken}, "into itself"),
        "no source": (taken, "fork", {"at_seq": 1, "source_conversation_id": absent}, "no such conversation"),
        "fork beyond the log": (taken, "fork", {"at_seq": 50, "source_conversation_id": src}, "no event #50"),
    }
    for cid, command, fields, _ in refused.values():
        send(s, cid, "", command=command, tenant="demo" if cid != other else "other", **fields)
    # Another tenant forking or branching src: refused as a tenant mismatch.
    send(s, taken, "", command="fork", tenant="other", at_seq=1, source_conversation_id=src)
    send(s, src, "", command="branch", tenant="other", at_seq=1)
    keys = {src, other, absent, taken}
    letters = wait_until(
        lambda: found if len(found := dead_letters(s, keys)) >= len(refused) + 1 else None,
        90,
        "every refused command in the DLQ",
        logs=stack.logs(),
    )
    assert len(letters) == len(refused) + 2
    classes = sorted(letter[ERROR_CLASS] for letter in letters)
    assert classes == sorted(["HistoryCommandError"] * len(refused) + ["TenantMismatchError"] * 2)
    for _, _, _, words in refused.values():
        assert any(words in letter[ERROR_MESSAGE] for letter in letters), words
    # Nothing of them was written, and the runner goes on.
    stack.send(src, "demo", "still there?")
    replied(stack, src, "still there?")
    assert stack.api(f"/conversations/{src}")["events"] > events_before
    assert view(stack, taken) == [] and view(stack, absent) == []


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """`convdb fork ...` as a user runs it, on the stack's broker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")}
    argv = [sys.executable, "-m", "convdb", "fork", *args]
    return subprocess.run(
        argv, env={**env, **stack.settings.to_env()}, capture_output=True, text=True, timeout=60
    )


@pytest.mark.slow  # each command reads the conversation from Kafka first: ~50 s of CI per broker
def test_the_cli_forks_and_branches_and_refuses_bad_input(stack: Stack) -> None:
    src, copy = f"c-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    stack.send(src, "demo", "hello")
    stack.wait_status(src, "finished")
    last = stack.api(f"/conversations/{src}")["last_seq"]
    for args, words in [
        ((src, "--at", str(last + 1), "--tenant", "demo"), f"there is no event #{last + 1}"),
        ((src, "--at", "1", "--tenant", "other"), "no conversation"),
        ((src, "--at", "-3"), "--at"),
        ((src, "--at", "1", "--as", src, "--tenant", "demo"), "a fork needs a new id"),
        ((src, "--at", "1", "--as", copy, "--branch"), "--branch stays in CONV"),
    ]:
        done = cli(stack, *args)
        assert done.returncode == 2 and words in done.stderr, (args, done.stderr)
    done = cli(stack, src, "--at", "2", "--as", copy, "--tenant", "demo")
    assert done.returncode == 0 and f"into {copy}" in done.stdout, done.stderr
    (fork_event,) = wait_until(lambda: view(stack, copy), 60, "the CLI's fork", logs=stack.logs())
    assert fork_event["source_conversation_id"] == src
    taken = cli(stack, src, "--at", "2", "--as", copy, "--tenant", "demo")
    assert taken.returncode == 2 and "already exists" in taken.stderr
    # A branch at a user message (#2) answers it again on the new branch.
    assert cli(stack, src, "--at", "2", "--branch", "--tenant", "demo").returncode == 0
    again = wait_until(
        lambda: (
            (e := view(stack, src)) and len(e) > 3 and e[2]["seq"] > last and e[-1]["kind"] != "message" and e
        ),
        60,
        "the CLI's branch answered",
        logs=stack.logs(),
    )
    assert [e["seq"] for e in again[:2]] == [1, 2] and texts(again) == ["hello", "Noted: hello"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["c1", "--at", "0"], "--at: must be from 1"),
        (["c1", "--at", "x"], "--at: not an integer"),
        (["c1"], "--at"),
        (["c/1", "--at", "1"], "CONV"),
        (["c1", "--at", "1", "--as", "c1"], "a fork needs a new id"),
        (["c1", "--at", "1", "--as", "c2", "--branch"], "--branch stays in CONV"),
    ],
)
def test_the_cli_refuses_bad_arguments_with_exit_2(
    args: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before any broker is asked (the log's refusals are in the slow test above)."""
    try:
        code = main(["fork", *args])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    assert words in capsys.readouterr().err
