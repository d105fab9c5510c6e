"""The API redacts messages, receipts and decisions on worker threads, never on its event loop
(real app, real broker, real SQLite store)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from convdb.consumers.api import create_app
from convdb.consumers.effects import EffectsConsumer
from convdb.consumers.store import ensure_projections, open_engine
from convdb.infra.kafka import apply_topics
from convdb.infra.reader import read_topic
from convdb.infra.secrets import SecretsRegistry
from convdb.infra.settings import Settings
from convdb.schemas import EffectResolved, EffectUnknown, InboxMessage, Receipt
from convdb.schemas.topics import EFFECTS, INBOX, RECEIPTS, Topic
from tests.helpers import now
from tests.reconciler.conftest import RECEIPT_SECRET
from tests.reconciler.ledger import CODEC, started_operation
from tests.reconciler.test_api import receipt_body, signed
from tests.reconciler.test_effects_projector import action_for, apply

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]

M = TypeVar("M", bound=BaseModel)
TOKEN = "ghp_" + "a1B2" * 9
ACME = {"X-API-Key": "k-acme"}


class WhereRedacted(SecretsRegistry):
    """The registry the API is given: it notes, for every record it redacts, whether an event loop
    was running on that thread (the API's loop is the only one there is)."""

    def __init__(self, secrets: dict[str, str]) -> None:
        super().__init__(secrets)
        self.on_loop: list[tuple[str, bool]] = []
        self._lock = threading.Lock()

    def redact_record(self, record: M) -> M:
        try:
            asyncio.get_running_loop()
            running = True
        except RuntimeError:
            running = False
        with self._lock:
            self.on_loop.append((type(record).__name__, running))
        return super().redact_record(record)


def test_messages_receipts_and_decisions_are_redacted_off_the_event_loop(
    make_settings: Callable[..., Settings], tmp_path
) -> None:
    settings = make_settings(
        store_url=f"sqlite:///{tmp_path / 'store.db'}",
        api={
            "keys": {"k-acme": "acme"},
            "receipt_secrets": {"tracker": RECEIPT_SECRET},
            "receipt_tools": {"tracker": ["create_issue"], "mailer": ["notify"]},
        },
    )
    apply_topics(settings)
    engine = open_engine(settings.resolved_store_url)
    ensure_projections(engine, [EffectsConsumer()])
    receipted, receipted_records = started_operation("conv-r")
    doubtful, doubtful_records = started_operation("conv-u", tool="notify", effect_class="irreversible")
    unknown = EffectUnknown(
        id="u1", operation_id=doubtful, conversation_id="conv-u", tenant_id="acme", timestamp=now(),
        reason="no lookup", evidence="irreversible, executing past its deadline", origin="reconciler",
    )  # fmt: skip
    apply(engine, [action_for(doubtful), *[r for _, r in receipted_records + doubtful_records], unknown])
    registry = WhereRedacted({"DB": "Xk9m2Qv7-db"})
    with TestClient(create_app(settings, secrets=registry)) as client:
        posted = client.post("/conversations", json={"content": f"db Xk9m2Qv7-db, {TOKEN}"}, headers=ACME)
        assert posted.status_code == 202, posted.text
        body = receipt_body(operation_id=receipted, result=f'{{"token": "{TOKEN}"}}')
        assert client.post("/receipts", content=body, headers=signed(body)).status_code == 202
        note = f"sent by hand with postgresql://ops:Hq2wZr8pL1@db/app and {TOKEN}"
        decided = client.post(f"/operations/{doubtful}/resolve", json={"decision": "failed", "note": note},
                              headers=ACME)  # fmt: skip
        assert decided.status_code == 202, decided.text

    assert sorted(registry.on_loop) == [
        ("EffectResolved", False),
        ("InboxMessage", False),
        ("Receipt", False),
    ]
    (message,) = [
        r for r in _records(settings, INBOX) if r.conversation_id == posted.json()["conversation_id"]
    ]
    assert isinstance(message, InboxMessage)
    assert message.content == "db <secret:DB>, <secret:detected.github_token>"
    (receipt,) = _records(settings, RECEIPTS)
    assert isinstance(receipt, Receipt) and receipt.result == '{"token": "<secret:detected.github_token>"}'
    (resolved,) = [r for r in _records(settings, EFFECTS) if isinstance(r, EffectResolved)]
    assert resolved.note == (
        "sent by hand with postgresql://ops:<secret:detected.url_password>@db/app and "
        "<secret:detected.github_token>"
    )


def _records(settings: Settings, topic: Topic) -> list[object]:
    return [CODEC.decode(m.value()) for m in read_topic(settings, topic.name(settings.namespace))]
