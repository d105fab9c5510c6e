"""faust `exactly_once` on Apache Kafka: proof that the reconciler's transactions really work there.

The worker is SIGKILLed while receipts stream in and restarted. Every operation ends with one
transition (by id), and the effects and changelog topics carry transaction markers, which
`at_least_once` never writes.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from convdb.consumers.reconciler import CHANGELOG
from convdb.consumers.reconciler.app import faust_config
from convdb.infra.kafka import apply_topics, common_config
from convdb.infra.settings import Settings
from convdb.projections.effects import OperationStatus
from convdb.schemas import AvroModel
from convdb.schemas.topics import ALL_TOPICS, EFFECTS, RECEIPTS, Topic
from tests.conftest import BrokerInfo, settings_for, wait_until
from tests.reconciler.conftest import (
    Proc,
    reconciler_proc,
    start_provider,
    wait_worker_ready,
)
from tests.reconciler.ledger import (
    distinct_transitions,
    fold_ledger,
    publish,
    read_ledger,
    receipt_for,
    reconciler_records,
    started_operation,
)

pytestmark = [pytest.mark.kafka]

OPERATIONS = 240


def test_the_processing_guarantee_follows_the_capability_record(
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings()
    embedded = settings.model_copy(update={"kafka": settings.kafka.model_copy(update={"embedded": True})})
    apache = settings.model_copy(update={"kafka": settings.kafka.model_copy(update={"embedded": False})})
    assert faust_config(apache)["processing_guarantee"] == "exactly_once"
    assert "producer_max_batch_size" not in faust_config(apache)
    assert faust_config(embedded)["processing_guarantee"] == "at_least_once"
    assert faust_config(embedded)["producer_max_batch_size"] == 1  # the embedded ListOffsets workaround


def count_records(settings: Settings, topic: str, isolation: str) -> tuple[int, int]:
    """(records a reader with this isolation sees, sum of the partitions' end offsets) of `topic`."""
    consumer = Consumer(
        {
            **common_config(settings),
            "group.id": f"count-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        seen, ends = 0, {}
        while len(ends) < len(parts):
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    seen += 1
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    ends[msg.partition()] = msg.offset()
        return seen, sum(ends.values())
    finally:
        consumer.close()


def publish_slowly(settings: Settings, inputs: list[tuple[Topic, AvroModel]], chunks: int) -> None:
    """Publish the inputs in chunks, 0.4 s apart."""
    size = -(-len(inputs) // chunks)
    for start in range(0, len(inputs), size):
        publish(settings, inputs[start : start + size])
        time.sleep(0.4)


@pytest.fixture
def stack(apache_broker: BrokerInfo, tmp_path: Path) -> Iterator[tuple[Settings, Proc]]:
    """A provider and one `convdb reconcile` worker on Apache Kafka."""
    provider, url = start_provider(tmp_path / "provider.log")
    procs = [provider]
    try:
        settings = settings_for(
            apache_broker,
            tmp_path / "data",
            reconciler={"tick_interval_s": 0.3, "receipt_grace_s": 0.3, "resolver_urls": {"tracker": url}},
        )
        apply_topics(settings, (*ALL_TOPICS, CHANGELOG))
        worker = reconciler_proc(settings, tmp_path / "reconciler.log").start()
        procs.append(worker)
        wait_worker_ready(worker)
        yield settings, worker
    finally:
        for proc in reversed(procs):
            proc.stop()


def test_a_killed_workers_open_transaction_is_aborted_and_nothing_is_doubled(
    stack: tuple[Settings, Proc],
) -> None:
    settings, worker = stack
    ops, inputs = [], []
    for i in range(OPERATIONS):
        op, records = started_operation(f"conv-e{i}-{uuid.uuid4().hex[:6]}", deadline=timedelta(minutes=5))
        ops.append(op)
        inputs += [*records, (RECEIPTS, receipt_for(op, provider_receipt=f"trk-{i}"))]
    # Inputs keep arriving while the worker dies: it always has a transaction open then.
    feeder = threading.Thread(target=publish_slowly, args=(settings, inputs, 16), daemon=True)
    feeder.start()
    wait_until(lambda: len(reconciler_records(read_ledger(settings))) >= 20, 60, "confirmations under way")
    worker.kill()
    worker.start()
    feeder.join(60)
    wait_worker_ready(worker)

    def all_confirmed() -> bool:
        states = fold_ledger(read_ledger(settings))
        return all(op in states and states[op].status is OperationStatus.CONFIRMED for op in ops)

    wait_until(all_confirmed, 120, f"all {OPERATIONS} operations confirmed after the restart")
    emitted = reconciler_records(read_ledger(settings))
    # One transition per operation: the records a read_committed reader sees carry one id. The
    # same id may appear twice: the timer's output is not tied to a consumed record, so a worker
    # killed after committing a transition but before reading it back sends it again (readers
    # keep one; the table has no record of what it sent, as faust tables cannot be written from
    # a timer).
    assert Counter(len(distinct_transitions(emitted[op])) for op in ops) == {1: OPERATIONS}
    assert all(distinct_transitions(emitted[op]) == {"effect_confirmed": 1} for op in ops)

    # Transaction markers take offsets but are no records: offsets beyond the records a
    # read_uncommitted reader sees are the reconciler's commits and aborts.
    markers = aborted = 0
    for topic in (EFFECTS.name(settings.namespace), CHANGELOG.name(settings.namespace)):
        everything, end = count_records(settings, topic, "read_uncommitted")
        committed, _ = count_records(settings, topic, "read_committed")
        markers += end - everything
        aborted += everything - committed
    print(f"\ntransaction markers {markers}, aborted records {aborted}")
    assert markers > 0, "the reconciler wrote no transaction"
    assert worker.starts == 2
