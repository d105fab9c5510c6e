"""A store filled by the real consumers (views, index, stats, titles, effects) from a real broker."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from convdb.consumers.api import create_app
from convdb.consumers.effects import EffectsConsumer
from convdb.consumers.index import IndexConsumer
from convdb.consumers.runner import Runner
from convdb.consumers.stats import StatsConsumer
from convdb.consumers.titles import TitlesConsumer
from convdb.consumers.views import ViewsConsumer
from convdb.infra.kafka import apply_topics
from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import (
    ActiveLeafChangedEvent,
    AvroModel,
    EffectUnknown,
    EventEnvelope,
    ForkEvent,
    SingleObjectCodec,
)
from convdb.schemas.topics import EFFECTS, EVENTS
from tests.conftest import wait_until
from tests.consumers.builders import conversation
from tests.helpers import now
from tests.reconciler.ledger import publish, started_operation
from tests.reconciler.test_effects_projector import action_for

KEYS = {"key-a": "tenant-a", "key-b": "tenant-b"}
HOSTILE = (
    '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2"> & "quotes" \r\nevent: reload'
)
"""A user message no page may run: it must render as this very text."""
SECRET_B = "tenant B confidential bug"


@dataclass
class ConsoleWorld:
    """The store, the settings and the unknown operations of each tenant."""

    settings: Settings
    events: list[EventEnvelope]
    unknown_a: str
    unknown_b: str

    def of(self, conv: str) -> list[EventEnvelope]:
        """The published events of one conversation."""
        return [e for e in self.events if e.conversation_id == conv]

    def client(self, https: bool = False) -> TestClient:
        """A fresh client (its own cookie jar) over the API app."""
        return TestClient(
            create_app(self.settings), base_url="https://testserver" if https else "http://testserver"
        )


def _unknown(conv: list[EventEnvelope]) -> tuple[str, list[AvroModel]]:
    last = conv[-1]
    tenant = last.tenant_id
    op, records = started_operation(
        last.conversation_id, tool="notify", effect_class="irreversible", tenant=tenant
    )
    action = action_for(op, seq=last.seq + 1).model_copy(update={"tenant_id": tenant, "parent_id": last.id})
    unknown = EffectUnknown(
        id=str(uuid.uuid4()),
        operation_id=op,
        conversation_id=last.conversation_id,
        tenant_id=tenant,
        timestamp=now(),
        reason="no lookup for notify",
        evidence="irreversible, started, no receipt",
        origin="runner",
    )
    return op, [action, *[r for _, r in records], unknown]


def branched(conv: str, tenant: str) -> list[EventEnvelope]:
    """Five events, a sixth on a branch from the third, then the active leaf switched back to the fifth."""
    events = conversation(conv, 5, tenant)
    side = conversation(conv, 6, tenant)[5].model_copy(update={"parent_id": events[2].id})
    back = ActiveLeafChangedEvent(
        id=str(uuid.uuid4()), conversation_id=conv, tenant_id=tenant, seq=7, timestamp=side.timestamp,
        source="user", parent_id=None, leaf_event_id=events[4].id,
    )  # fmt: skip
    return [*events, side, back]


def forked(conv: str, source: EventEnvelope) -> list[EventEnvelope]:
    """A conversation forked from `source` (its root is the `ForkEvent`), then one message."""
    fork = ForkEvent(
        id=str(uuid.uuid4()), conversation_id=conv, tenant_id=source.tenant_id, seq=1, timestamp=now(),
        source="user", parent_id=source.id, source_conversation_id=source.conversation_id,
        source_event_id=source.id,
    )  # fmt: skip
    message = conversation(conv, 1, source.tenant_id)[0].model_copy(update={"seq": 2, "parent_id": fork.id})
    return [fork, message]


def _run_consumers(settings: Settings, expected_events: int, expected_ops: int) -> None:
    consumers = [
        ViewsConsumer(settings),
        IndexConsumer(settings),
        StatsConsumer(settings),
        TitlesConsumer(settings),
        EffectsConsumer(settings),
    ]
    runner = Runner(settings, consumers, name="console-test")
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()

    def done() -> bool:
        with runner.engine.connect() as conn:
            try:
                n = conn.execute(sa.text("SELECT SUM(event_count) FROM stats_conversations")).scalar()
                m = conn.execute(
                    sa.text("SELECT COUNT(*) FROM effects_operations WHERE status = 'unknown'")
                ).scalar()
            except sa.exc.OperationalError:
                return False
        return n == expected_events and m == expected_ops

    try:
        wait_until(done, 90, "consumers to store every event and operation")
    finally:
        runner.stop()
        thread.join(30)


@pytest.fixture(scope="module")
def console_world(
    make_settings: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleWorld]:
    """Tenant A: a1 (30 events, a hostile first message, an unknown operation), a2 (450 events),
    a3 (two branches), a4 (forked from a1); tenant B: b1 (5 events, a confidential title, an
    unknown operation)."""
    tmp = tmp_path_factory.mktemp("console")
    settings = make_settings(store_url=f"sqlite:///{tmp / 'store.db'}", api={"keys": KEYS})
    apply_topics(settings)
    a1 = conversation("a1", 30, "tenant-a")
    a1[0] = a1[0].model_copy(update={"content": HOSTILE})
    b1 = conversation("b1", 5, "tenant-b")
    b1[0] = b1[0].model_copy(update={"content": SECRET_B})
    op_a, records_a = _unknown(a1)
    op_b, records_b = _unknown(b1)
    events = a1 + conversation("a2", 450, "tenant-a") + branched("a3", "tenant-a") + forked("a4", a1[9]) + b1
    EventPublisher(settings, SingleObjectCodec()).publish_durable(events)
    publish(
        settings, [(EVENTS if isinstance(r, EventEnvelope) else EFFECTS, r) for r in records_a + records_b]
    )
    events += [r for r in records_a + records_b if isinstance(r, EventEnvelope)]
    _run_consumers(settings, len(events), 2)
    yield ConsoleWorld(settings, events, op_a, op_b)


def sign_in(client: TestClient, key: str, name: str = "") -> None:
    """Sign in through the login form (fails the test if it does not work)."""
    page = client.get("/console/login")
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token, page.text
    done = client.post(
        "/console/login", data={"csrf": token.group(1), "api_key": key, "name": name}, follow_redirects=False
    )
    assert done.status_code == 303 and done.headers["location"] == "/", done.text


def csrf_of(html: str) -> str:
    """The CSRF token a signed-in page's forms carry."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)
