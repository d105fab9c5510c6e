"""The capability record is true: every capability is probed on each broker kind, supported or not."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from convdb.infra.capabilities import APACHE, EMBEDDED, BrokerCapabilities
from convdb.infra.dev.apache import ApacheKafka
from convdb.infra.dev.broker import EmbeddedBroker
from tests.brokers.probes import PROBES, fresh_topic
from tests.conftest import BrokerInfo

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]

RECORDED = {f.name for f in dataclasses.fields(BrokerCapabilities)} - {"kind"}


def test_every_recorded_capability_has_a_probe() -> None:
    assert set(PROBES) | {"idempotent_producer_survives_restart"} == RECORDED
    assert APACHE.kind == "apache" and EMBEDDED.kind == "embedded"


@pytest.mark.parametrize("capability", sorted(PROBES))
def test_the_record_matches_the_broker(broker: BrokerInfo, capability: str) -> None:
    recorded = getattr(broker.capabilities, capability)
    observed = PROBES[capability](broker.bootstrap_servers)
    assert observed == recorded, f"{broker.name}: {capability} observed {observed}, recorded {recorded}"


class Restartable:
    """A private broker of the test's kind that can be crashed and started again on the same port."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        if kind == "embedded":
            self.embedded = EmbeddedBroker(root / "tansu.log").start()
            self.bootstrap_servers = self.embedded.bootstrap_servers
        else:
            self.apache = ApacheKafka(root, size=1).start()
            self.bootstrap_servers = self.apache.bootstrap_servers

    def crash_and_restart(self) -> None:
        """SIGKILL, then start on the same port (the embedded broker's memory storage starts empty)."""
        if self.kind == "embedded":
            port = self.embedded.port
            self.embedded.stop()
            self.embedded = EmbeddedBroker(self.embedded.log_path, port=port).start()
        else:
            self.apache.kill(1)
            self.apache.restart(1)

    def stop(self) -> None:
        """Stop it."""
        (self.embedded if self.kind == "embedded" else self.apache).stop()


@pytest.fixture
def restartable(broker: BrokerInfo, tmp_path: Path) -> Iterator[Restartable]:
    """A private broker of the same kind as `broker`."""
    server = Restartable(broker.name, tmp_path)
    try:
        yield server
    finally:
        server.stop()


def test_idempotent_producer_survives_a_broker_restart_as_recorded(
    broker: BrokerInfo, restartable: Restartable
) -> None:
    bs = restartable.bootstrap_servers
    topic = fresh_topic(bs)
    errors: list[KafkaError] = []
    conf = {"bootstrap.servers": bs, "enable.idempotence": True, "message.timeout.ms": 15000}
    producer = Producer(conf)
    producer.produce(topic, b"before", b"k", on_delivery=lambda err, _m: errors.append(err) if err else None)
    producer.flush(30)
    assert errors == []

    restartable.crash_and_restart()
    admin = AdminClient({"bootstrap.servers": bs})
    if topic not in admin.list_topics(timeout=10).topics:  # the embedded broker forgot it
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer.produce(topic, b"after", b"k", on_delivery=lambda err, _m: errors.append(err) if err else None)
    producer.flush(30)
    observed = errors == []
    assert observed == broker.capabilities.idempotent_producer_survives_restart, errors
