"""`POST /conversations/{id}/branch` and `/fork`: what the read side knows is refused up front (4xx with
a message); an accepted command is an `InboxMessage` in the right conversation's inbox.

The runner's side (it carries the commands out, and dead-letters what the log refuses) is in
tests/fleet/test_branching.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from convdb.infra.reader import read_topic
from convdb.schemas import InboxMessage, SingleObjectCodec
from convdb.schemas.topics import INBOX
from tests.api.conftest import A, B, World

pytestmark = pytest.mark.kafka


def inbox_record(world: World, conversation_id: str, record_id: str) -> InboxMessage:
    """The inbox record the API wrote (it is durable before 202)."""
    found = read_topic(world.settings, INBOX.name(world.settings.namespace))
    codec = SingleObjectCodec()
    for msg in found:
        if msg.key() == conversation_id.encode():
            record = codec.decode(msg.value(), expect=(InboxMessage,))
            if record.id == record_id:
                return record
    raise AssertionError(f"no inbox record {record_id} for {conversation_id}")


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/conversations/a1/branch", {"at_seq": 31}, 400, "no event #31"),
        ("/conversations/a1/fork", {"at_seq": 99}, 400, "its events are #1 to #30"),
        ("/conversations/a1/branch", {"at_seq": 0}, 400, "at_seq"),
        ("/conversations/a1/branch", {"at_seq": "three"}, 400, "at_seq"),
        ("/conversations/a1/branch", {}, 400, "at_seq"),
        ("/conversations/a1/branch", {"at_seq": 2, "new_conversation_id": "x"}, 400, "new_conversation_id"),
        ("/conversations/a1/fork", {"at_seq": 2**63}, 400, "at_seq"),
        ("/conversations/a1/fork", {"at_seq": 2, "new_conversation_id": "a/b"}, 400, "new_conversation_id"),
        ("/conversations/a1/fork", {"at_seq": 2, "new_conversation_id": "a2"}, 409, "'a2' already exists"),
        ("/conversations/a1/fork", {"at_seq": 2, "new_conversation_id": "b1"}, 409, "'b1' already exists"),
        ("/conversations/a1/fork", {"at_seq": 2, "new_conversation_id": "a1"}, 409, "a fork needs a new id"),
        ("/conversations/b1/fork", {"at_seq": 2}, 404, "no conversation 'b1'"),
        ("/conversations/b1/branch", {"at_seq": 2}, 404, "no conversation 'b1'"),
        ("/conversations/nowhere/branch", {"at_seq": 1}, 404, "no conversation 'nowhere'"),
    ],
)
def test_bad_branch_and_fork_requests_are_refused_with_a_message(
    world: World, path: str, body: dict[str, Any], status: int, words: str
) -> None:
    """Tenant A asks; b1 is tenant B's (404, the same as a conversation that does not exist)."""
    answer = world.client.post(path, json=body, headers=A)
    assert answer.status_code == status, answer.text
    assert words in answer.text


def test_a_branch_goes_to_the_conversations_own_inbox(world: World) -> None:
    answer = world.client.post("/conversations/a1/branch", json={"at_seq": 5}, headers=A)
    assert answer.status_code == 202, answer.text
    accepted = answer.json()
    assert accepted["conversation_id"] == "a1"
    record = inbox_record(world, "a1", accepted["id"])
    assert (record.command, record.at_seq, record.tenant_id) == ("branch", 5, "tenant-a")


def test_a_fork_goes_to_the_new_conversations_inbox(world: World) -> None:
    """Its runner (the new conversation's single writer) writes the fork; without an id, a UUID."""
    named = world.client.post(
        "/conversations/a1/fork", json={"at_seq": 7, "new_conversation_id": "a1-f"}, headers=A
    )
    drawn = world.client.post("/conversations/a2/fork", json={"at_seq": 3}, headers=A)
    assert (named.status_code, drawn.status_code) == (202, 202), (named.text, drawn.text)
    record = inbox_record(world, "a1-f", named.json()["id"])
    assert (record.command, record.at_seq, record.source_conversation_id) == ("fork", 7, "a1")
    new = drawn.json()["conversation_id"]
    assert len(new) == 36 and new != "a2"
    assert inbox_record(world, new, drawn.json()["id"]).source_conversation_id == "a2"


def test_another_tenant_cannot_fork_or_branch(world: World) -> None:
    for path in ("/conversations/a1/fork", "/conversations/a1/branch"):
        answer = world.client.post(path, json={"at_seq": 2}, headers=B)
        assert answer.status_code == 404 and "no conversation 'a1'" in answer.text
