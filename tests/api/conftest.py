"""A store filled by the real consumers from a real broker, and the API over it."""

from __future__ import annotations

import threading
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
from convdb.schemas import EventEnvelope, SingleObjectCodec
from tests.conftest import wait_until
from tests.consumers.builders import conversation

KEYS = {"key-a": "tenant-a", "key-b": "tenant-b"}
A = {"X-API-Key": "key-a"}
B = {"X-API-Key": "key-b"}


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


@pytest.fixture(scope="module")
def world(
    make_settings: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    """Tenant A has conversations a1 (30 events) and a2 (10); tenant B has b1 (5)."""
    tmp = tmp_path_factory.mktemp("api")
    settings = make_settings(store_url=f"sqlite:///{tmp / 'store.db'}", api={"keys": KEYS})
    apply_topics(settings)
    events = (
        conversation("a1", 30, "tenant-a")
        + conversation("a2", 10, "tenant-a")
        + conversation("b1", 5, "tenant-b")
    )
    fill_store(settings, events)
    with TestClient(create_app(settings)) as client:
        yield World(settings, events, client)
