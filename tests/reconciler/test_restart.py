"""The reconciler is SIGKILLed mid-stream and restarted: its table comes back from the changelog.

Operations whose inputs were all consumed and committed before the kill are decided after the
restart (their deadlines fall after it): only the changelog can have told the new worker about
them. No transition is lost, and none is doubled (a repeated record keeps its id).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition

from convdb.consumers.reconciler import CHANGELOG
from convdb.infra.kafka import apply_topics, common_config
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.projections.effects import OperationStatus
from convdb.schemas.topics import ALL_TOPICS, EFFECTS, RECEIPTS
from tests.conftest import BrokerInfo, settings_for, wait_until
from tests.reconciler.conftest import (
    Proc,
    provider_stats,
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


@pytest.fixture(scope="module")
def stack(broker: BrokerInfo, module_dir: Path, procs: list[Proc]) -> Iterator[tuple[Settings, Proc, str]]:
    provider, url = start_provider(module_dir / "provider.log")
    procs.append(provider)
    settings = settings_for(
        broker,
        module_dir / "data",
        reconciler={"tick_interval_s": 0.3, "receipt_grace_s": 0.3, "resolver_urls": {"tracker": url}},
    )
    apply_topics(settings, (*ALL_TOPICS, CHANGELOG))
    worker = reconciler_proc(settings, module_dir / "reconciler.log").start()
    procs.append(worker)
    wait_worker_ready(worker)
    yield settings, worker, url


def committed_to_end(settings: Settings) -> bool:
    """True when the reconciler's group has committed every effects/receipts record."""
    ends: dict[tuple[str, int], int] = {}
    for topic in (EFFECTS, RECEIPTS):
        for m in read_topic(settings, topic.name(settings.namespace)):
            ends[(m.topic(), m.partition())] = m.offset() + 1
    consumer = Consumer({**common_config(settings), "group.id": settings.group("reconciler")})
    try:
        committed = consumer.committed([TopicPartition(t, p) for t, p in ends], timeout=10)
    finally:
        consumer.close()
    return all(tp.offset >= ends[(tp.topic, tp.partition)] for tp in committed)


def test_sigkill_and_restart_loses_and_doubles_nothing(stack: tuple[Settings, Proc, str]) -> None:
    settings, worker, url = stack
    early, late, inputs = [], [], []
    for i in range(6):  # confirmed from receipts before the kill
        op, records = started_operation(f"conv-r{i}-{uuid.uuid4().hex[:6]}", deadline=timedelta(minutes=5))
        early.append(op)
        inputs += [*records, (RECEIPTS, receipt_for(op, provider_receipt=f"trk-r{i}"))]
    for i in range(16):  # decided by lookups, most of them after the restart
        op, records = started_operation(
            f"conv-l{i}-{uuid.uuid4().hex[:6]}", deadline=timedelta(seconds=4 + i)
        )
        late.append(op)
        inputs += records
        if i % 2 == 0:  # the runner reached the provider before it died
            httpx.post(f"{url}/issues", json={"title": op}, headers={"Idempotency-Key": op}, timeout=5)
    publish(settings, inputs)

    def states() -> dict:
        return fold_ledger(read_ledger(settings))

    def early_confirmed() -> bool:
        now = states()
        return all(op in now and now[op].status is OperationStatus.CONFIRMED for op in early)

    wait_until(early_confirmed, 60, "receipt confirmations before the kill")
    wait_until(lambda: committed_to_end(settings), 60, "the reconciler to commit every input")
    worker.kill()
    decided_before = [op for op in late if states()[op].status is not OperationStatus.EXECUTING]
    worker.start()
    wait_worker_ready(worker)

    def all_decided() -> bool:
        now = states()
        return all(now[op].status is not OperationStatus.EXECUTING for op in late)

    wait_until(all_decided, 90, "every lookup decided after the restart")
    final = states()
    emitted = reconciler_records(read_ledger(settings))
    for op in early:
        assert distinct_transitions(emitted[op]) == {"effect_confirmed": 1}
    created = set(provider_stats(url)["by_key"])  # type: ignore[arg-type]
    for op in late:
        expected = "effect_confirmed" if op in created else "effect_resolved"
        assert distinct_transitions(emitted[op]) == {expected: 1}, (op, emitted[op])
        assert final[op].status is (OperationStatus.CONFIRMED if op in created else OperationStatus.PROPOSED)
    assert len(decided_before) < len(late), "the kill came after every decision: nothing was tested"
    assert worker.starts == 2
