"""Receipts ingress and the human queue over HTTP (real app, real broker, real SQLite store)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from convdb.consumers.api import create_app
from convdb.consumers.effects import EffectsConsumer
from convdb.consumers.store import ensure_projections, open_engine
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.schemas import EffectConfirmed, EffectResolved, EffectUnknown, InboxMessage, Receipt
from convdb.schemas.topics import EFFECTS, INBOX, RECEIPTS
from tests.helpers import now
from tests.reconciler.conftest import RECEIPT_SECRET
from tests.reconciler.ledger import CODEC, started_operation
from tests.reconciler.test_effects_projector import action_for, apply

pytestmark = [pytest.mark.kafka]

ACME, OTHER = {"X-API-Key": "k-acme"}, {"X-API-Key": "k-other"}


@pytest.fixture
def api(make_settings: Callable[..., Settings], tmp_path) -> Iterator[tuple[TestClient, Settings]]:
    from convdb.infra.kafka import apply_topics

    settings = make_settings(
        store_url=f"sqlite:///{tmp_path / 'store.db'}",
        api={
            "keys": {"k-acme": "acme", "k-other": "other"},
            "receipt_secrets": {"tracker": RECEIPT_SECRET, "mailer": "mailer-secret"},
            "receipt_tools": {"tracker": ["create_issue"], "mailer": ["notify"]},
            "receipt_wait_s": 0.3,
            "auth_failures": 5,
        },
    )
    apply_topics(settings)
    ensure_projections(open_engine(settings.resolved_store_url), [EffectsConsumer()])
    with TestClient(create_app(settings)) as client:
        yield client, settings


def signed(body: bytes, secret: str = RECEIPT_SECRET) -> dict[str, str]:
    return {"X-Convdb-Signature": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()}


def receipt_body(**overrides: object) -> bytes:
    body = {
        "provider": "tracker", "operation_id": "conv-1/act-1", "tenant_id": "acme",
        "provider_receipt": "trk-1", "status": "succeeded", "result": '{"id": 1}',
        "timestamp": now().isoformat(),
    }  # fmt: skip
    body.update(overrides)
    return json.dumps(body).encode()


def proposed(settings: Settings, conversation: str, tool: str = "create_issue", tenant: str = "acme") -> str:
    """An operation the read side knows (proposed and started), as the runner would have left it."""
    op, records = started_operation(conversation, tool=tool, tenant=tenant)
    apply(open_engine(settings.resolved_store_url), [r for _, r in records])
    return op


def test_receipts_ingress(api: tuple[TestClient, Settings]) -> None:
    client, settings = api
    op = proposed(settings, "conv-1")
    body = receipt_body(operation_id=op)
    assert client.post("/receipts", content=body).status_code == 401
    assert client.post("/receipts", content=body, headers=signed(body, "wrong")).status_code == 401
    assert client.post("/receipts", content=body, headers=signed(body + b" ")).status_code == 401
    garbage = b"{not json"
    bad = client.post("/receipts", content=garbage, headers=signed(garbage))
    assert bad.status_code == 400 and "not JSON" in bad.json()["detail"]
    partial = receipt_body(operation_id=op, provider_receipt=None)
    missing = client.post("/receipts", content=partial, headers=signed(partial))
    assert missing.status_code == 400 and "provider_receipt" in missing.json()["detail"]
    ok = client.post("/receipts", content=body, headers=signed(body))
    assert ok.status_code == 202, ok.text
    again = client.post("/receipts", content=body, headers=signed(body))  # the provider retries
    assert again.json()["receipt_id"] == ok.json()["receipt_id"]
    (first, second) = [
        CODEC.decode(m.value()) for m in read_topic(settings, RECEIPTS.name(settings.namespace))
    ]
    assert isinstance(first, Receipt) and first == second
    assert (first.conversation_id, first.provider_receipt) == ("conv-1", "trk-1")


def test_hostile_receipts_are_refused_before_anything_is_stored(api: tuple[TestClient, Settings]) -> None:
    client, settings = api
    op = proposed(settings, "conv-h")
    others = proposed(settings, "conv-o", tenant="other")
    notify = proposed(settings, "conv-n", tool="notify")

    def post(body: bytes, secret: str = RECEIPT_SECRET) -> tuple[int, str]:
        found = client.post("/receipts", content=body, headers=signed(body, secret))
        return found.status_code, found.json()["detail"] if found.status_code >= 400 else ""

    old = (now() - timedelta(days=2)).isoformat()
    future = (now() + timedelta(hours=1)).isoformat()
    cases = {
        "unknown operation": (receipt_body(operation_id="conv-h/nope"), 404),
        "another tenant's operation": (receipt_body(operation_id=others), 404),
        "a tool the provider is not bound to": (receipt_body(operation_id=notify), 403),
        "a timestamp too old": (receipt_body(operation_id=op, timestamp=old), 400),
        "a timestamp in the future": (receipt_body(operation_id=op, timestamp=future), 400),
        "NUL in the receipt id": (receipt_body(operation_id=op, provider_receipt="trk\x00"), 400),
        "NUL in the result": (receipt_body(operation_id=op, result="a\x00b"), 400),
        "a huge operation id": (receipt_body(operation_id="c/" + "x" * 5000), 400),
        "deep nesting": (b"[" * 50_000 + b"]" * 50_000, 413),
        "a JSON array": (b"[1, 2]", 400),
    }
    for what, (body, status) in cases.items():
        found, detail = post(body)
        assert found == status, (what, found, detail)
        assert len(detail) < 600, (what, detail)
    nested = b'{"a":' * 10_000 + b"1" + b"}" * 10_000
    assert post(nested)[0] == 400  # deep nesting within the size cap: 400, never 500
    # The mailer's secret signs a receipt naming the tracker: refused.
    assert post(receipt_body(operation_id=op), "mailer-secret")[0] == 401
    big = b"x" * (settings.api.receipt_max_bytes + 1)
    assert client.post("/receipts", content=big, headers=signed(big)).status_code == 413
    assert list(read_topic(settings, RECEIPTS.name(settings.namespace))) == []  # nothing was stored
    assert post(receipt_body(operation_id=notify, provider="mailer"), "mailer-secret")[0] == 202


def test_failed_authentication_is_rate_limited(api: tuple[TestClient, Settings]) -> None:
    client, _settings = api
    for _ in range(5):
        assert client.get("/operations", headers={"X-API-Key": "guess"}).status_code == 401
    limited = client.get("/operations", headers={"X-API-Key": "guess"})
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    forged = receipt_body()
    assert client.post("/receipts", content=forged, headers=signed(forged, "not-a-secret")).status_code == 429
    # Others' failures never refuse a valid key or a valid signature from the same address.
    assert client.get("/operations", headers={"X-API-Key": "k-acme"}).status_code == 200
    body = receipt_body()
    assert client.post("/receipts", content=body, headers=signed(body)).status_code == 404  # no such op


def test_human_queue_and_resolve(api: tuple[TestClient, Settings]) -> None:
    client, settings = api
    engine = open_engine(settings.resolved_store_url)
    op, records = started_operation("conv-q", tool="notify", effect_class="irreversible")
    done, done_records = started_operation("conv-q")
    unknown = EffectUnknown(
        id="u1", operation_id=op, conversation_id="conv-q", tenant_id="acme", timestamp=now(),
        reason="no lookup", evidence="irreversible, executing past its deadline", origin="reconciler",
    )  # fmt: skip
    confirmed = EffectConfirmed(
        id="k1", operation_id=done, conversation_id="conv-q", tenant_id="acme", timestamp=now()
    )
    apply(engine, [action_for(op), *[r for _, r in records + done_records], unknown, confirmed])

    queue = client.get("/operations", params={"status": "unknown"}, headers=ACME).json()
    (item,) = queue["operations"]
    assert item["operation_id"] == op and item["intent"]["tool"] == "notify"
    assert item["intent"]["arguments"] == {"text": "hi", "to": "bob"}
    assert "irreversible" in item["evidence"]["detail"] and item["target"]
    assert queue["counts"]["unknown"] == 1 and queue["counts"]["confirmed"] == 1
    assert client.get("/operations", params={"status": "unknown"}, headers=OTHER).json()["operations"] == []
    assert client.get("/operations", headers={"X-API-Key": "nope"}).status_code == 401

    assert (
        client.post(f"/operations/{op}/resolve", json={"decision": "retry"}, headers=OTHER).status_code == 404
    )
    assert (
        client.post(f"/operations/{done}/resolve", json={"decision": "retry"}, headers=ACME).status_code
        == 409
    )
    bad = client.post(f"/operations/{op}/resolve", json={"decision": "maybe"}, headers=ACME)
    assert bad.status_code == 400
    ok = client.post(
        f"/operations/{op}/resolve", json={"decision": "failed", "note": "never sent"}, headers=ACME
    )
    assert ok.status_code == 202, ok.text

    resolved = [CODEC.decode(m.value()) for m in read_topic(settings, EFFECTS.name(settings.namespace))]
    assert [(r.decision, r.note) for r in resolved if isinstance(r, EffectResolved)] == [
        ("failed", "never sent")
    ]
    (wake,) = [CODEC.decode(m.value()) for m in read_topic(settings, INBOX.name(settings.namespace))]
    assert isinstance(wake, InboxMessage) and (wake.command, wake.operation_id, wake.content) == (
        "resolve", op, "failed",
    )  # fmt: skip
    detail = client.get(f"/operations/{op}", headers=ACME).json()
    assert [e["kind"] for e in detail["ledger"]][-1] == "effect_unknown"
    status = client.get("/conversations/conv-q/status", headers=ACME).json()
    assert status["effects"]["unknown"] == 1 and status["effects_all_confirmed"] is False
    assert client.get("/conversations/conv-q/status", headers=OTHER).status_code == 404
