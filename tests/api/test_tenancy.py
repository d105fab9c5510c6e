"""Tenant boundary and hostile input at the API: ownership from the log, one 404, bounded everything.

The store was filled by the real consumers, which are stopped now: whatever is published here
stays unknown to the read side, which is exactly the lagging-read-side race.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from convdb.consumers.api.deps import ApiContext
from convdb.infra.reader import read_topic
from convdb.producers.publisher import EventPublisher
from convdb.schemas import InboxMessage, SingleObjectCodec
from convdb.schemas.topics import INBOX
from tests.api.conftest import A, B, World
from tests.consumers.builders import conversation

pytestmark = pytest.mark.kafka


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def inbox_of(world: World, conversation_id: str) -> list[InboxMessage]:
    codec = SingleObjectCodec()
    records = read_topic(world.settings, INBOX.name(world.settings.namespace))
    return [
        codec.decode(m.value(), expect=(InboxMessage,))
        for m in records
        if m.key() == conversation_id.encode()
    ]


def test_not_yours_and_does_not_exist_are_the_same_404(world: World) -> None:
    missing = fresh("nope")
    for path in ("", "/view", "/status"):
        theirs = world.client.get(f"/conversations/b1{path}", headers=A)
        absent = world.client.get(f"/conversations/{missing}{path}", headers=A)
        assert theirs.status_code == absent.status_code == 404
        assert theirs.json()["detail"].replace("b1", "X") == absent.json()["detail"].replace(missing, "X")
    for command in ("pause", "resume", "cancel"):
        assert world.client.post(f"/conversations/b1/{command}", headers=A).status_code == 404
        assert world.client.post(f"/conversations/{missing}/{command}", headers=A).status_code == 404
    assert world.client.get("/operations/b1/x", headers=A).status_code == 404


def test_a_cancel_is_a_command_in_the_owners_inbox(world: World) -> None:
    """`POST /cancel` puts one `cancel` record (sent by the user) on the conversation's inbox."""
    before = len(inbox_of(world, "a2"))
    found = world.client.post("/conversations/a2/cancel", headers=A)
    assert found.status_code == 202, found.text
    sent = inbox_of(world, "a2")[before:]
    assert [(m.command, m.sender, m.tenant_id, m.id) for m in sent] == [
        ("cancel", "user", "tenant-a", found.json()["id"])
    ]


def test_a_post_never_claims_an_id_whose_events_the_read_side_has_not_folded(world: World) -> None:
    lagging = fresh("lag")
    EventPublisher(world.settings, SingleObjectCodec()).publish_durable(conversation(lagging, 3, "tenant-b"))
    posted = world.client.post(f"/conversations/{lagging}/messages", json={"content": "mine now"}, headers=A)
    assert posted.status_code == 404, posted.text
    assert inbox_of(world, lagging) == []
    own = world.client.post(f"/conversations/{lagging}/messages", json={"content": "hello"}, headers=B)
    assert own.status_code == 202, own.text  # the owner may, although the read side lags


def test_a_post_never_claims_an_id_another_tenant_posted_to_first(world: World) -> None:
    new = fresh("new")
    assert (
        world.client.post(f"/conversations/{new}/messages", json={"content": "first"}, headers=B).status_code
        == 202
    )
    second = world.client.post(f"/conversations/{new}/messages", json={"content": "me too"}, headers=A)
    assert second.status_code == 404
    assert [m.tenant_id for m in inbox_of(world, new)] == ["tenant-b"]


def test_the_loser_of_a_race_for_a_new_id_is_answered_404(world: World) -> None:
    ctx: ApiContext = world.client.app.state.ctx  # type: ignore[attr-defined]
    new = fresh("race")
    owner, claim = ctx.ownership.owner(new)  # A looks: nobody owns it ...
    assert owner is None and claim is not None
    assert (
        world.client.post(f"/conversations/{new}/messages", json={"content": "b"}, headers=B).status_code
        == 202
    )
    late = InboxMessage(  # ... and publishes after B did
        id=str(uuid.uuid4()), conversation_id=new, tenant_id="tenant-a", timestamp=datetime.now(UTC),
        command="message", content="a",
    )  # fmt: skip
    (delivery,) = ctx.publish([(INBOX, late)])
    assert ctx.ownership.confirm_claim(claim, new, "tenant-a", delivery.offset) is False
    assert ctx.ownership.confirm_claim(claim, new, "tenant-b", delivery.offset) is True


HOSTILE_PATHS = [
    "/conversations/a%00b",
    "/conversations/a%0Ab/view",
    "/conversations/" + "x" * 5000,
    "/conversations/%E2%80%AEevil/status",
    "/operations/" + "c/" + "y" * 5000,
    "/operations/no-slash",
]
HOSTILE_QUERIES = [
    ("/conversations/a1/view", {"offset": str(2**64)}),
    ("/conversations/a1/view", {"offset": "-1"}),
    ("/conversations", {"limit": str(10**30)}),
    ("/conversations", {"order": "recent", "after": "99999999999999999999999999:a1"}),
    ("/conversations", {"after": "x" * 5000}),
    ("/events", {"limit": str(10**30)}),
    ("/events", {"cursor": "WzEsMSwiYSIsOTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5LCJlIl0"}),  # seq > 2**63
    ("/events", {"conversation_id": "a\u0001b"}),
    ("/events", {"kind": "k" * 10_000}),
    ("/events", {"since": "0001-01-01T00:00:00Z"}),
    ("/operations", {"after": "\u0000"}),
    ("/operations", {"limit": "-5"}),
]


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_hostile_paths_are_refused_not_crashed(world: World, path: str) -> None:
    found = world.client.get(path, headers=A)
    assert found.status_code in (400, 404), (path[:60], found.status_code, found.text[:300])
    assert len(found.text) < 1200


@pytest.mark.parametrize(("path", "params"), HOSTILE_QUERIES)
def test_hostile_queries_are_400_with_a_bounded_message(world: World, path: str, params: dict) -> None:
    found = world.client.get(path, params=params, headers=A)
    assert found.status_code in (200, 400), (params, found.status_code, found.text[:300])
    assert len(found.text) < 1200 or found.status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"content": "nul \u0000 inside"},
        {"content": "x" * 100_001},
        {"content": "ok", "sender": "s\u0007"},
        {"content": "ok", "sender": "s" * 300},
        {"content": "ok", "extra": "field"},
    ],
)
def test_hostile_message_bodies_are_400_and_store_nothing(world: World, body: dict) -> None:
    target = fresh("body")
    found = world.client.post(f"/conversations/{target}/messages", json=body, headers=A)
    assert found.status_code == 400, found.text[:300]
    assert len(found.text) < 1200
    assert inbox_of(world, target) == []


def test_a_pasted_credential_never_reaches_the_inbox(world: World) -> None:
    target = fresh("paste")
    key = "sk-proj-" + "Q" * 40
    found = world.client.post(f"/conversations/{target}/messages", json={"content": f"use {key}"}, headers=A)
    assert found.status_code == 202
    (message,) = inbox_of(world, target)
    assert key not in message.content and "<secret:detected.llm_api_key>" in message.content
