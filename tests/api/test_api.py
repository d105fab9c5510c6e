"""The query API over a store filled by the real consumers: tenants, search, view, inbox, errors."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from convdb.infra.reader import read_topic as scan
from convdb.schemas import InboxMessage, SingleObjectCodec
from convdb.schemas.topics import INBOX
from tests.api.conftest import A, B, C, World
from tests.helpers import read_topic

pytestmark = pytest.mark.kafka


def test_list_shows_only_the_tenants_conversations_with_title_and_stats(world: World) -> None:
    body = world.client.get("/conversations", headers=A).json()
    convs = {c["conversation_id"]: c for c in body["conversations"]}
    assert set(convs) == {"a1", "a2"}
    a1 = convs["a1"]
    assert a1["title"] == "please fix bug a1"
    assert a1["title_origin"] == "first_message"
    assert a1["events"] == 30 and a1["view_length"] == 30 and a1["last_seq"] == 30
    true_counts: dict[str, int] = {}
    for e in world.of("a1"):
        true_counts[e.kind] = true_counts.get(e.kind, 0) + 1  # type: ignore[attr-defined]
    assert a1["stats"]["counts"] == true_counts
    assert a1["stats"]["tool_calls"] == true_counts["action"]
    assert a1["execution_status"] == "running"
    assert [
        c["conversation_id"] for c in world.client.get("/conversations", headers=B).json()["conversations"]
    ] == ["b1"]


def test_keyset_pages_of_conversations(world: World) -> None:
    first = world.client.get("/conversations", params={"limit": 1}, headers=A).json()
    assert [c["conversation_id"] for c in first["conversations"]] == ["a1"]
    second = world.client.get(
        "/conversations", params={"limit": 1, "after": first["next_after"]}, headers=A
    ).json()
    assert [c["conversation_id"] for c in second["conversations"]] == ["a2"]
    assert second["next_after"] is None


def test_another_tenants_conversation_is_404_everywhere(world: World) -> None:
    assert world.client.get("/conversations/b1", headers=A).status_code == 404
    assert world.client.get("/conversations/b1/view", headers=A).status_code == 404
    assert world.client.get("/conversations/b1", headers=B).status_code == 200
    found = world.client.get("/events", params={"conversation_id": "b1"}, headers=A).json()
    assert found["events"] == []
    posted = world.client.post("/conversations/b1/messages", json={"content": "hi"}, headers=A)
    assert posted.status_code == 404


@pytest.mark.parametrize("headers", [{}, {"X-API-Key": "nope"}])
def test_missing_or_unknown_key_is_401(world: World, headers: dict[str, str]) -> None:
    response = world.client.get("/conversations", headers=headers)
    assert response.status_code == 401
    assert "key" in response.json()["detail"].lower()


def test_view_is_the_active_branch_and_as_of_offset(world: World) -> None:
    body = world.client.get("/conversations/a1/view", headers=A).json()
    assert [e["id"] for e in body["events"]] == [e.id for e in world.of("a1")]
    assert body["active_leaf"] == world.of("a1")[-1].id
    rows = world.client.get("/events", params={"conversation_id": "a1", "limit": 500}, headers=A).json()[
        "events"
    ]
    tenth = next(r for r in rows if r["seq"] == 10)
    past = world.client.get("/conversations/a1/view", params={"offset": tenth["offset"]}, headers=A).json()
    assert [e["seq"] for e in past["events"]] == list(range(1, 11))
    at = world.of("a1")[4].timestamp.isoformat()
    by_time = world.client.get("/conversations/a1/view", params={"at": at}, headers=A).json()
    assert [e["seq"] for e in by_time["events"]] == [1, 2, 3, 4, 5]


def test_search_pages_through_everything_in_keyset_order(world: World) -> None:
    seen, cursor = [], None
    while True:
        params = {"limit": 7, **({"cursor": cursor} if cursor else {})}
        page = world.client.get("/events", params=params, headers=A).json()
        seen.extend(page["events"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    expected = sorted(
        (e for e in world.events if e.tenant_id == "tenant-a"),
        key=lambda e: (e.timestamp, e.conversation_id, e.seq),
    )
    assert [r["event_id"] for r in seen] == [e.id for e in expected]


def test_search_filters_by_kind_source_and_time(world: World) -> None:
    actions = world.client.get(
        "/events", params={"kind": "action", "conversation_id": "a1"}, headers=A
    ).json()
    assert {r["kind"] for r in actions["events"]} == {"action"}
    assert len(actions["events"]) == sum(1 for e in world.of("a1") if e.kind == "action")  # type: ignore[attr-defined]
    two = world.client.get("/events", params=[("kind", "action"), ("kind", "observation")], headers=A).json()
    assert {r["kind"] for r in two["events"]} == {"action", "observation"}
    users = world.client.get("/events", params={"source": "user"}, headers=A).json()
    assert {r["conversation_id"] for r in users["events"]} == {"a1", "a2"}
    events = world.of("a1")
    window = {
        "since": events[2].timestamp.isoformat(),
        "until": events[5].timestamp.isoformat(),
        "conversation_id": "a1",
    }
    assert [r["seq"] for r in world.client.get("/events", params=window, headers=A).json()["events"]] == [
        3,
        4,
        5,
    ]


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"kind": "bogus"}, "kinds"),
        ({"source": "robot"}, "sources"),
        ({"limit": 0}, "limit"),
        ({"since": "2025-01-02T00:00:00Z", "until": "2025-01-01T00:00:00Z"}, "since"),
        ({"since": "yesterday"}, "since"),
        ({"q": " !! "}, "`q`"),
        ({"kinds": "action"}, "unknown query parameter 'kinds'"),
        ({"conversation": "a1"}, "unknown query parameter 'conversation'"),
    ],
)
def test_bad_filters_and_cursors_are_400_with_a_message(world: World, params: dict, needle: str) -> None:
    response = world.client.get("/events", params=params, headers=A)
    assert response.status_code == 400, response.text
    assert needle in response.json()["detail"]


def test_full_text_search_finds_the_tenants_words_only_with_snippets(world: World) -> None:
    found = world.client.get("/events", params={"q": "FIX bug"}, headers=A).json()
    assert [(e["conversation_id"], e["seq"]) for e in found["events"]] == [("a1", 1), ("a2", 1)]
    snippet = found["events"][0]["snippet"]
    assert snippet["text"] == "user: please fix bug a1"
    assert [snippet["text"][a:b] for a, b in snippet["highlights"]] == ["fix", "bug"]
    assert world.client.get("/events", params={"q": "b1"}, headers=A).json()["events"] == []
    theirs = world.client.get("/events", params={"q": "b1"}, headers=B).json()["events"]
    assert [(e["conversation_id"], e["seq"]) for e in theirs] == [("b1", 1)]
    # Filters and keyset pages compose with the words.
    first = world.client.get("/events", params={"q": "bug", "limit": 1}, headers=A).json()
    rest = world.client.get(
        "/events", params={"q": "bug", "limit": 1, "cursor": first["next_cursor"]}, headers=A
    ).json()
    assert [e["conversation_id"] for e in first["events"] + rest["events"]] == ["a1", "a2"]
    assert rest["next_cursor"] is None
    one = world.client.get("/events", params={"q": "bug", "conversation_id": "a2"}, headers=A).json()
    assert [e["conversation_id"] for e in one["events"]] == ["a2"]
    plain = world.client.get("/events", params={"conversation_id": "a2", "limit": 1}, headers=A).json()
    assert plain["events"][0]["snippet"] is None


def test_post_message_lands_on_the_inbox_topic(world: World) -> None:
    response = world.client.post("/conversations/a1/messages", json={"content": "and add tests"}, headers=A)
    assert response.status_code == 202, response.text
    accepted = response.json()
    records = read_topic(world.settings, INBOX.name(world.settings.namespace), 1)
    assert len(records) == 1
    partition, offset, key, value = records[0]
    assert (partition, offset) == (accepted["partition"], accepted["offset"])
    message = SingleObjectCodec().decode(value, expect=(InboxMessage,))
    assert key == b"a1"
    assert (message.id, message.content, message.tenant_id, message.command) == (
        accepted["id"],
        "and add tests",
        "tenant-a",
        "message",
    )
    assert world.client.post("/conversations/a1/messages", json={"content": ""}, headers=A).status_code == 400


def test_openapi_docs_are_served(world: World) -> None:
    assert world.client.get("/docs").status_code == 200
    paths = world.client.get("/openapi.json").json()["paths"]
    assert {"/conversations", "/conversations/{conversation_id}/view", "/events"} <= set(paths)


def test_a_message_names_its_agent_and_an_unknown_agent_is_400(world: World) -> None:
    for agent, needle in (
        ("no-such-agent", "unknown agent 'no-such-agent'"),
        # A runner would import and call what module:attr names: only an operator's --agent may.
        ("os:system", "module:attr is only for a runner's own --agent"),
    ):
        refused = world.client.post(
            "/conversations/a9/messages", json={"content": "hi", "agent": agent}, headers=A
        )
        assert refused.status_code == 400, refused.text
        assert needle in refused.json()["detail"] and "(default" in refused.json()["detail"]
    posted = world.client.post(
        "/conversations/a9/messages", json={"content": "hi", "agent": "default"}, headers=A
    )
    assert posted.status_code == 202, posted.text
    plain = world.client.post("/conversations/a9/messages", json={"content": "hi"}, headers=A)
    assert plain.status_code == 202, plain.text
    inbox = INBOX.name(world.settings.namespace)
    codec = SingleObjectCodec()
    mine = [m for m in scan(world.settings, inbox) if m.key() == b"a9"]
    sent = [codec.decode(m.value(), expect=(InboxMessage,)) for m in mine]
    assert [m.agent for m in sent] == ["default", None]


def test_a_conversation_shows_the_agent_it_runs_and_its_tools(world: World) -> None:
    expected = {"name": "shop", "version": "0123456789abcdef", "tools": ["charge", "send_sms"]}
    assert world.client.get("/conversations/c1", headers=C).json()["agent"] == expected
    (listed,) = world.client.get("/conversations", headers=C).json()["conversations"]
    assert listed["agent"] == expected
    # A conversation whose first event names no agent (here: no system prompt at all) shows none.
    assert world.client.get("/conversations/a1", headers=A).json()["agent"] is None


def test_the_console_shows_the_agent_and_its_tools(world: World) -> None:
    with TestClient(world.client.app) as console:
        login = console.get("/console/login").text
        token = re.search(r'name="csrf" value="([^"]+)"', login)
        assert token, login
        form = {"csrf": token.group(1), "api_key": "key-c", "name": ""}
        assert console.post("/console/login", data=form, follow_redirects=False).status_code == 303
        page = console.get("/console/conversations/c1").text
        assert "agent <strong>shop</strong>" in page and "0123456789abcdef" in page
        assert "tools charge, send_sms" in page
        assert "agent shop" in console.get("/").text
