"""The task-tree routes over a store the real consumers filled: children, root, rolled-up totals."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from convdb.consumers.api import create_app
from convdb.infra.kafka import apply_topics
from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import (
    ActionEvent,
    EventEnvelope,
    LLMUsageEvent,
    SingleObjectCodec,
    StateUpdateEvent,
    SystemPromptEvent,
)
from convdb.schemas.topics import EFFECTS
from tests.api.conftest import KEYS, A, B
from tests.console.conftest import _run_consumers, _unknown, sign_in
from tests.consumers.builders import T0
from tests.reconciler.ledger import publish

pytestmark = pytest.mark.kafka


def member(
    cid: str, parent: str | None, depth: int, tokens: int, cost: float, status: str
) -> list[EventEnvelope]:
    """A conversation of tenant A: its system prompt (linked to `parent`), one LLM call, a status."""
    common: dict[str, Any] = {
        "conversation_id": cid,
        "tenant_id": "tenant-a",
        "source": "agent",
        "timestamp": T0,
    }
    prompt = SystemPromptEvent(
        **common, id=str(uuid.uuid4()), seq=1, content="p", parent_conversation_id=parent,
        parent_operation_id=None if parent is None else f"{parent}/a/child-0", delegation_depth=depth,
    )  # fmt: skip
    usage = LLMUsageEvent(
        **common, id=str(uuid.uuid4()), seq=2, parent_id=prompt.id, model="m", llm_response_id="r",
        prompt_tokens=tokens, completion_tokens=0, latency_ms=1.0, cost=cost,
    )  # fmt: skip
    update = StateUpdateEvent(**{**common, "source": "environment"}, id=str(uuid.uuid4()), seq=3,
                              parent_id=usage.id, execution_status=status)  # fmt: skip
    return [prompt, usage, update]


def waiting(cid: str) -> list[EventEnvelope]:
    """A running root whose `delegate` call (no observation yet) waits for its child `<cid>-kid`."""
    root = member(cid, None, 0, 1, 0.0, "running")
    call = ActionEvent(
        conversation_id=cid, tenant_id="tenant-a", source="agent", timestamp=T0, id=str(uuid.uuid4()),
        seq=4, parent_id=root[-1].id, tool_name="delegate", tool_call_id="c", arguments="{}",
        llm_response_id="r", operation_id=f"{cid}/a", intent_hash="h", effect_class="keyed",
    )  # fmt: skip
    return [*root, call, *member(f"{cid}-kid", cid, 1, 2, 0.0, "running")]


@pytest.fixture(scope="module")
def client(
    make_settings: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    """root -> (kid0 -> grandkid, kid1) for tenant A; grandkid has an operation waiting for a human."""
    tmp = tmp_path_factory.mktemp("tree")
    settings = make_settings(store_url=f"sqlite:///{tmp / 'store.db'}", api={"keys": KEYS})
    apply_topics(settings)
    grandkid = member("grandkid", "kid0", 2, 5, 0.0625, "finished")
    _, unknown = _unknown(grandkid)
    events = [
        *member("root", None, 0, 100, 0.5, "finished"),
        *member("kid0", "root", 1, 10, 0.25, "finished"),
        *member("kid1", "root", 1, 20, 0.125, "error"),
        *grandkid,
        *(r for r in unknown if isinstance(r, EventEnvelope)),
        *waiting("waiter"),
    ]
    EventPublisher(settings, SingleObjectCodec()).publish_durable(events)
    publish(settings, [(EFFECTS, r) for r in unknown if not isinstance(r, EventEnvelope)])
    _run_consumers(settings, len(events), 1)
    with TestClient(create_app(settings)) as c:
        sign_in(c, "key-a")  # the console pages' session (the API routes read the X-API-Key header)
        yield c


def test_children_carry_their_state_and_their_subtrees_totals(client: TestClient) -> None:
    got = client.get("/conversations/root/children", headers=A).json()
    assert got["total"] == {"conversations": 4, "tokens": 135, "cost": 0.9375}
    kids = {k["conversation_id"]: k for k in got["children"]}
    assert sorted(kids) == ["kid0", "kid1"]
    assert kids["kid0"]["execution_status"] == "finished" and kids["kid1"]["execution_status"] == "error"
    assert kids["kid0"]["total"] == {"conversations": 2, "tokens": 15, "cost": 0.3125}
    assert kids["kid0"]["children"] == 1 and kids["kid0"]["parent_operation_id"] == "root/a/child-0"
    assert client.get("/conversations/grandkid/children", headers=A).json()["children"] == []


def test_the_root_of_a_grandchild_is_found_with_its_path_and_the_whole_tree(client: TestClient) -> None:
    got = client.get("/conversations/grandkid/root", headers=A).json()
    assert got["root"] == "root" and got["path"] == ["root", "kid0", "grandkid"]
    assert got["tree"]["total"]["conversations"] == 4
    assert [c["conversation_id"] for c in got["tree"]["children"]] == ["kid0", "kid1"]
    assert client.get("/conversations/root/root", headers=A).json()["path"] == ["root"]


def test_another_tenants_tree_does_not_exist(client: TestClient) -> None:
    for route in ("children", "root"):
        response = client.get(f"/conversations/kid0/{route}", headers=B)
        assert response.status_code == 404 and "no conversation" in response.json()["detail"]


def test_the_console_links_parent_and_children_with_the_tree_totals(client: TestClient) -> None:
    page = client.get("/console/conversations/kid0").text
    tree_html = page[page.index('id="task-tree"') :]
    assert 'Delegated by <a href="/console/conversations/root">root</a>' in tree_html
    assert '<a href="/console/conversations/grandkid">grandkid</a>' in tree_html
    assert (
        "This subtree: 2 conversations, 15 tokens" in tree_html
        and "the whole tree: 4, 135 tokens" in tree_html
    )
    root = client.get("/console/conversations/root").text
    assert root.count('class="task-children"') == 1 and "Delegated by" not in root
    plain = client.get("/console/conversations/grandkid").text
    assert 'Delegated by <a href="/console/conversations/kid0">kid0</a> (task tree of' in plain


def test_the_human_queue_shows_a_sub_agents_parent_chain(client: TestClient) -> None:
    page = client.get("/console/queue").text
    chain = page[page.index('class="small muted task-chain"') :]
    assert chain.index('href="/console/conversations/root"') < chain.index(
        'href="/console/conversations/kid0"'
    )
    assert "its parents wait for it" in chain


def test_a_parent_waiting_for_its_children_shows_waiting_for_children(client: TestClient) -> None:
    """Its log says `running`; the tree, the conversation, the list filter and the console say
    `waiting_for_children` (its child, running, is not waiting for anyone)."""
    tree = client.get("/conversations/waiter-kid/root", headers=A).json()["tree"]
    assert tree["execution_status"] == "waiting_for_children"
    assert tree["children"][0]["execution_status"] == "running"
    assert client.get("/conversations/waiter", headers=A).json()["execution_status"] == "waiting_for_children"
    listed = client.get("/conversations", params={"status": "waiting_for_children"}, headers=A).json()
    assert [c["conversation_id"] for c in listed["conversations"]] == ["waiter"]
    page = client.get("/console/conversations/waiter").text
    assert '<span class="badge status-waiting_for_children">waiting for children</span>' in page
