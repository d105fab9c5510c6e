"""Inbox: messages sent before the runner starts and during a crash are appended once, in order."""

from __future__ import annotations

import signal
import subprocess
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import InboxMessage, MessageEvent, SingleObjectCodec
from convdb.schemas.topics import DLQ, EVENTS, INBOX
from tests.producers._support import by_conversation, direct, records, runner_cmd, start

pytestmark = pytest.mark.kafka


def send(publisher: EventPublisher, conversation: str, text: str) -> str:
    msg = InboxMessage(
        id=str(uuid.uuid4()),
        conversation_id=conversation,
        tenant_id="t1",
        timestamp=datetime.now(UTC),
        command="message",
        content=text,
    )
    publisher.publish_durable([msg], INBOX)
    return msg.id


def serve(settings: Settings, workspace: Path, idle_exit: float, **env: str) -> subprocess.Popen[str]:
    """A fleet runner process that exits after `idle_exit` idle seconds."""
    return start(runner_cmd(workspace, idle_exit=idle_exit), settings, **env)


def test_messages_before_start_and_during_a_crash_are_appended_once_in_order(
    settings: Settings, tmp_path: Path
) -> None:
    settings = direct(settings)
    publisher = EventPublisher(settings, SingleObjectCodec())
    sent = {"conv-a": [], "conv-b": []}
    for i in range(3):
        sent["conv-a"].append(send(publisher, "conv-a", f"a{i}"))
    sent["conv-b"].append(send(publisher, "conv-b", "b0"))
    # Poison on the inbox: goes to the DLQ, the runner carries on.
    publisher.produce_raw(INBOX.name(settings.namespace), "conv-a", b"not avro at all")
    publisher.flush()

    crashing = serve(settings, tmp_path, 30, CONVDB_CRASH_AT="after_inbox_message")
    crashing.communicate(timeout=60)
    assert crashing.returncode == -signal.SIGKILL  # died after a MessageEvent, before the commit

    for i in range(3, 5):
        sent["conv-a"].append(send(publisher, "conv-a", f"a{i}"))
    sent["conv-b"].append(send(publisher, "conv-b", "b1"))

    runner = serve(settings, tmp_path, 6)
    out, err = runner.communicate(timeout=90)
    assert runner.returncode == 0, err[-3000:]

    events = by_conversation(records(settings, EVENTS))
    for conv, ids in sent.items():
        users = [
            e
            for e in sorted(events[conv], key=lambda e: e.seq)
            if isinstance(e, MessageEvent) and e.role == "user"
        ]
        assert [e.id for e in users] == ids, conv  # each exactly once, in the order sent
        replies = {
            e.parent_id for e in events[conv] if not (isinstance(e, MessageEvent) and e.role == "user")
        }
        assert all(u.id in replies for u in users), conv  # answered, even the one the crash interrupted
        assert [e.content for e in users] == [f"{conv[-1]}{i}" for i in range(len(ids))]
        assert [e.seq for e in sorted(events[conv], key=lambda e: e.seq)] == list(
            range(1, len(events[conv]) + 1)
        )
    assert len(records_raw(settings)) == 1


def records_raw(settings: Settings) -> list[bytes]:
    from convdb.infra.reader import read_topic

    return [m.value() for m in read_topic(settings, DLQ.name(settings.namespace))]
