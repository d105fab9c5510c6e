"""A store filled by the real consumers from a real broker, and the API over it."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from convdb.consumers.api import create_app
from convdb.consumers.index import IndexConsumer
from convdb.consumers.runner import Runner
from convdb.consumers.stats import StatsConsumer
from convdb.consumers.titles import TitlesConsumer
from convdb.consumers.views import ViewsConsumer
from convdb.infra.kafka import apply_topics
from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import EventEnvelope, MessageEvent, SingleObjectCodec, SystemPromptEvent
from tests.conftest import wait_until
from tests.consumers.builders import T0, conversation

KEYS = {"key-a": "tenant-a", "key-b": "tenant-b", "key-c": "tenant-c"}
A = {"X-API-Key": "key-a"}
B = {"X-API-Key": "key-b"}
C = {"X-API-Key": "key-c"}


@dataclass
class World:
    """What the API tests read: settings, the published events and a client."""

    settings: Settings
    events: list[EventEnvelope]
    client: TestClient

    def of(self, conv: str) -> list[EventEnvelope]:
        """The published events of one conversation."""
        return [e for e in self.events if e.conversation_id == conv]


def fill_store(settings: Settings, events: list[EventEnvelope]) -> None:
    """Publish events and run every consumer until all of them are in the store."""
    EventPublisher(settings, SingleObjectCodec()).publish_durable(events)
    runner = Runner(
        settings,
        [ViewsConsumer(settings), IndexConsumer(settings), StatsConsumer(settings), TitlesConsumer(settings)],
        name="api-test",
    )
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()

    def done() -> bool:
        with runner.engine.connect() as conn:
            try:
                n = conn.execute(sa.text("SELECT COUNT(*) FROM index_events")).scalar()
                m = conn.execute(sa.text("SELECT SUM(event_count) FROM stats_conversations")).scalar()
            except sa.exc.OperationalError:
                return False
        return n == len(events) and m == len(events)

    try:
        wait_until(done, 60, "consumers to store every event")
    finally:
        runner.stop()
        thread.join(30)


def started_by_agent(conv: str, tenant: str) -> list[EventEnvelope]:
    """A conversation whose first event records the agent that runs it."""
    common = {"conversation_id": conv, "tenant_id": tenant, "source": "agent"}
    prompt = SystemPromptEvent(
        **common, id=str(uuid.uuid4()), seq=1, timestamp=T0, content="You run a shop.",
        tools=("charge", "send_sms"), agent="shop", agent_version="0123456789abcdef",
    )  # fmt: skip
    message = MessageEvent(
        **{**common, "source": "user"}, id=str(uuid.uuid4()), seq=2, timestamp=T0,
        parent_id=prompt.id, role="user", content="charge cus_42",
    )  # fmt: skip
    return [prompt, message]


@pytest.fixture(scope="module")
def world(
    make_settings: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    """Tenant A has conversations a1 (30 events) and a2 (10); tenant B has b1 (5); tenant C has c1,
    started by the agent `shop` (its system prompt, then a user message)."""
    tmp = tmp_path_factory.mktemp("api")
    settings = make_settings(store_url=f"sqlite:///{tmp / 'store.db'}", api={"keys": KEYS})
    apply_topics(settings)
    events = (
        conversation("a1", 30, "tenant-a")
        + conversation("a2", 10, "tenant-a")
        + conversation("b1", 5, "tenant-b")
        + started_by_agent("c1", "tenant-c")
    )
    fill_store(settings, events)
    with TestClient(create_app(settings)) as client:
        yield World(settings, events, client)
