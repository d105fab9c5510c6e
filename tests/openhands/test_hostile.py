"""Hostile webhook posts: a clear 4xx, and nothing of a refused post is stored."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from convdb.consumers.api import create_app
from convdb.infra.dlq import ERROR_CLASS, ERROR_MESSAGE
from convdb.infra.producer import DurableProducer
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.schemas import ExternalBatch, SingleObjectCodec
from convdb.schemas.topics import DLQ, INBOX
from tests.conftest import wait_until
from tests.openhands.conftest import KEY, Convdb, inbox_batches
from tests.projections.test_openhands import SAMPLE

pytestmark = pytest.mark.kafka
CID = uuid.uuid4()
URL = f"/openhands/webhooks/events/{CID.hex}"
GOOD = {"X-API-Key": KEY}


@pytest.fixture
def client(settings: Settings, tmp_path: Any) -> Iterator[TestClient]:
    limits = settings.openhands.model_copy(
        update={"max_body_bytes": 64_000, "max_events": 50, "max_record_bytes": 8_000}
    )
    api = settings.api.model_copy(update={"keys": {KEY: "tenant-oh"}})
    app = create_app(
        settings.model_copy(
            update={"api": api, "openhands": limits, "store_url": f"sqlite:///{tmp_path}/s.db"}
        )
    )
    with TestClient(app) as client:
        yield client


def batch(*events: dict[str, Any]) -> list[dict[str, Any]]:
    return [copy.deepcopy(e) for e in events]


def refused(
    client: TestClient,
    status: int,
    message: str,
    body: Any = None,
    *,
    headers: Any = GOOD,
    raw: Any = None,
    url: str = URL,
) -> None:
    answer = client.post(url, headers=headers, content=raw if raw is not None else json.dumps(body))
    assert answer.status_code == status, answer.text
    assert message in answer.json()["detail"]


def test_wrong_keys_malformed_unknown_and_huge_posts_are_refused_whole(
    client: TestClient, settings: Settings
) -> None:
    good = batch(*SAMPLE)
    refused(client, 401, "missing X-API-Key", good, headers={})
    refused(
        client, 401, "missing X-API-Key", good, headers={"X-Session-API-Key": KEY}
    )  # the agent-server's own key
    refused(client, 401, "unknown API key", good, headers={"X-API-Key": "nope"})
    refused(
        client,
        400,
        "not an OpenHands conversation id",
        good,
        url="/openhands/webhooks/events/not-a-conversation",
    )
    refused(client, 400, "body is not JSON", raw=b'[{"id": ')
    refused(client, 400, "must be a JSON array", {"events": good})
    refused(
        client, 400, "unknown event kind 'EvilEvent'", [*good[:2], {**good[2], "kind": "EvilEvent"}, good[3]]
    )
    no_call = {k: v for k, v in good[2].items() if k != "tool_call"}
    refused(client, 400, "`tool_call` is missing", [good[0], good[1], no_call])
    refused(client, 400, "appears twice", [good[0], good[0]])
    refused(client, 400, "lone surrogate", raw=json.dumps(good).replace("hello there", "\\ud800").encode())
    many = [{**good[1], "id": str(uuid.uuid4())} for _ in range(51)]
    refused(client, 413, "the limit is 50", many)
    refused(
        client,
        413,
        "the limit is 64000",
        [{**good[1], "llm_message": {"role": "user", "content": [{"type": "text", "text": "x" * 70_000}]}}],
    )
    big = {**good[1], "llm_message": {"role": "user", "content": [{"type": "text", "text": "x" * 9_000}]}}
    refused(client, 413, "the limit is 8000", [good[0], big])
    refused(client, 400, "`id` is missing", {"title": "no id"}, url="/openhands/webhooks/conversations")
    assert inbox_batches(settings, str(CID)) == []  # nothing of any refused post

    split = [
        {
            **good[1],
            "id": str(uuid.uuid4()),
            "llm_message": {"role": "user", "content": [{"type": "text", "text": "y" * 3_000}]},
        }
        for _ in range(6)
    ]
    stored = client.post(URL, headers=GOOD, content=json.dumps([good[0], *split]))
    assert stored.status_code == 200 and stored.json()["events"] == 7
    records = inbox_batches(settings, str(CID))
    assert len(records) == len(stored.json()["records"]) > 1  # split under max_record_bytes, in order
    assert [e["id"] for r in records for e in json.loads(r.payload)] == [
        good[0]["id"],
        *(e["id"] for e in split),
    ]


@pytest.mark.openhands
def test_other_tenants_and_user_messages_cannot_touch_an_openhands_conversation(convdb: Convdb) -> None:
    cid = str(uuid.uuid4())
    url = f"{convdb.base}/openhands/webhooks/events/{uuid.UUID(cid).hex}"
    assert httpx.post(url, headers=GOOD, content=json.dumps(SAMPLE), timeout=30).status_code == 200
    convdb.conversation(cid, len(SAMPLE))
    other = httpx.post(url, headers={"X-API-Key": "other-key"}, content=json.dumps(SAMPLE), timeout=30)
    assert other.status_code == 404  # the read side names the owner

    # Past the API (a record written before the read side caught up): the runner refuses it.
    codec = SingleObjectCodec()
    sneaky = ExternalBatch(
        id="x1",
        conversation_id=cid,
        tenant_id="tenant-other",
        timestamp=datetime.now(UTC),
        origin="openhands",
        payload_kind="events",
        payload=json.dumps([{**SAMPLE[1], "id": str(uuid.uuid4())}]),
    )
    producer = DurableProducer(convdb.settings)
    producer.send(INBOX.name(convdb.settings.namespace), cid, codec.encode(sneaky))
    producer.close()
    message = httpx.post(
        f"{convdb.base}/conversations/{cid}/messages", headers=GOOD, json={"content": "hi"}, timeout=30
    )
    assert message.status_code == 202
    convdb.runner_caught_up()

    letters = [
        m for m in read_topic(convdb.settings, DLQ.name(convdb.settings.namespace)) if m.key() == cid.encode()
    ]
    reasons = [dict(m.headers())[ERROR_MESSAGE].decode() for m in letters]
    assert [dict(m.headers())[ERROR_CLASS] for m in letters] == [
        b"TenantMismatchError",
        b"RecordRefusedError",
    ]
    assert "belongs to another tenant" in reasons[0] and "runs in OpenHands" in reasons[1]
    assert wait_until(
        lambda: convdb.get(f"/conversations/{cid}")["events"] == len(SAMPLE), 10, "no new event"
    )


def test_the_lagging_read_side_race_and_pasted_credentials_on_the_webhooks(
    settings: Settings, tmp_path: Any
) -> None:
    """No read side runs here: who owns a conversation comes from the inbox the posts wrote."""
    api = settings.api.model_copy(update={"keys": {KEY: "tenant-oh", "other-key": "tenant-other"}})
    app = create_app(settings.model_copy(update={"api": api, "store_url": f"sqlite:///{tmp_path}/s.db"}))
    cid = uuid.uuid4()
    url = f"/openhands/webhooks/events/{cid.hex}"
    leaked = "sk-proj-" + "L3aked" * 6
    first = batch(*SAMPLE)
    first[1]["llm_message"]["content"][0]["text"] = f"my key is {leaked}"
    with TestClient(app) as client:
        assert client.post(url, headers=GOOD, content=json.dumps(first)).status_code == 200
        other = {"X-API-Key": "other-key"}
        assert client.post(url, headers=other, content=json.dumps(SAMPLE)).status_code == 404
        info = {"id": cid.hex, "title": "mine now"}
        assert client.post("/openhands/webhooks/conversations", headers=other, json=info).status_code == 404
        assert client.post("/openhands/webhooks/conversations", headers=GOOD, json=info).status_code == 200
    records = inbox_batches(settings, str(cid))
    assert {r.tenant_id for r in records} == {"tenant-oh"}
    payload = records[0].payload
    assert leaked not in payload and "<secret:detected.llm_api_key>" in payload
    json.loads(payload)  # still valid JSON
