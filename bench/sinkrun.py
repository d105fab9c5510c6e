"""Sink throughput measurement: how many events/s one runner process applies exactly-once.

Reusable by `bench/`: `fill_topic` writes pre-encoded events fast, `measure_sink` times a
runner from its partition assignment until every event is in the store (the same clock as
the consume ceilings in `bench/sink.py`, so their ratio compares like with like).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from confluent_kafka import Producer

from convdb.consumers.base import Projector
from convdb.consumers.runner import Runner
from convdb.infra.kafka import producer_config
from convdb.infra.producer import DurableProducer
from convdb.infra.settings import Settings
from convdb.schemas import EventEnvelope, make_codec
from convdb.schemas.topics import EVENTS

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SinkResult:
    """One measurement."""

    events: int
    seconds: float
    store: str
    projectors: tuple[str, ...]

    @property
    def per_second(self) -> float:
        """Events applied per second."""
        return self.events / self.seconds if self.seconds > 0 else 0.0


def fill_topic(settings: Settings, events: Iterable[EventEnvelope]) -> int:
    """Produce events to the events topic as fast as possible (not idempotent: this is test data)."""
    codec = make_codec(settings.schema_registry_url)
    conf = producer_config(settings)
    conf.update({"enable.idempotence": False, "acks": "1", "linger.ms": 20, "batch.num.messages": 10000})
    producer = DurableProducer(settings, Producer(conf))
    topic = EVENTS.name(settings.namespace)
    count = 0
    for event in events:
        producer.produce_raw(topic, event.conversation_id, codec.encode(event))
        count += 1
    producer.flush(60)
    return count


def measure_sink(
    settings: Settings,
    projectors: Sequence[Projector],
    expected: int,
    timeout: float = 300.0,
    batch_size: int = 5000,
) -> SinkResult:
    """Run a runner over a filled topic; time it from its partition assignment until `expected` events."""
    runner = Runner(settings, projectors, name="bench", batch_size=batch_size)
    thread = threading.Thread(target=runner.run, name="bench-runner", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    metrics = runner.metrics
    try:
        while metrics.applied < expected:
            if time.monotonic() > deadline or not thread.is_alive():
                raise TimeoutError(f"only {metrics.applied} of {expected} events in {timeout}s")
            # A plain attribute, not the registry: collecting it every 10 ms held the GIL for 3-6%
            # of the runner's time (py-spy --gil), a cost of the bench, not of the sink.
            time.sleep(0.01)
        finished = time.perf_counter()
    finally:
        runner.stop()
        thread.join(60)
    if runner.assigned_at is None:
        raise TimeoutError("the runner applied events without an assignment")
    return SinkResult(
        expected,
        finished - runner.assigned_at,
        runner.engine.url.get_backend_name(),
        tuple(p.name for p in projectors),
    )
