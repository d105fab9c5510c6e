"""The reconciler worker (`convdb reconcile`, a real faust process) on ledger inputs published here.

One worker and one provider process are shared by the module; each test uses its own
conversations, so they do not see each other's operations.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from convdb.consumers.reconciler import CHANGELOG
from convdb.infra.kafka import apply_topics
from convdb.infra.settings import Settings
from convdb.projections.effects import OperationStatus
from convdb.schemas import EffectConfirmed, EffectResolved, EffectUnknown
from convdb.schemas.topics import ALL_TOPICS, RECEIPTS
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
    read_dlq,
    read_ledger,
    receipt_for,
    reconciler_records,
    started_operation,
)

pytestmark = [pytest.mark.kafka]


@pytest.fixture(scope="module")
def stack(broker: BrokerInfo, module_dir: Path, procs: list[Proc]) -> Iterator[tuple[Settings, Proc, str]]:
    """Settings, a running reconciler and the provider's URL."""
    provider, url = start_provider(module_dir / "provider.log")
    procs.append(provider)
    settings = settings_for(
        broker,
        module_dir / "data",
        reconciler={"tick_interval_s": 0.3, "receipt_grace_s": 0.5, "resolver_urls": {"tracker": url}},
    )
    apply_topics(settings, (*ALL_TOPICS, CHANGELOG))
    worker = reconciler_proc(settings, module_dir / "reconciler.log").start()
    procs.append(worker)
    wait_worker_ready(worker)
    yield settings, worker, url


def conv() -> str:
    return f"conv-{uuid.uuid4().hex[:8]}"


def settled(settings: Settings, ops: list[str], worker: Proc, timeout: float = 60.0) -> dict:
    def all_settled() -> dict | None:
        states = fold_ledger(read_ledger(settings))
        done = all(op in states and states[op].status is not OperationStatus.EXECUTING for op in ops)
        return states if done else None

    return wait_until(all_settled, timeout, f"{len(ops)} operations settled", logs=[worker.log])  # type: ignore[return-value]


def test_receipt_confirms_an_operation_whose_runner_died(stack: tuple[Settings, Proc, str]) -> None:
    settings, worker, _ = stack
    op, records = started_operation(conv(), deadline=timedelta(minutes=10))
    publish(settings, [*records, (RECEIPTS, receipt_for(op, provider_receipt="trk-42"))])
    states = settled(settings, [op], worker)
    assert states[op].status is OperationStatus.CONFIRMED
    (confirmed,) = reconciler_records(read_ledger(settings))[op]
    assert isinstance(confirmed, EffectConfirmed)
    assert (confirmed.origin, confirmed.provider_receipt, confirmed.result) == (
        "receipt",
        "trk-42",
        '{"id": 1}',
    )


def test_lookup_confirms_or_approves_a_retry(stack: tuple[Settings, Proc, str]) -> None:
    settings, worker, url = stack
    done, done_records = started_operation(conv())
    missing, missing_records = started_operation(conv())
    # The runner of `done` reached the provider before it died; the one of `missing` did not.
    created = httpx.post(f"{url}/issues", json={"title": "t"}, headers={"Idempotency-Key": done}, timeout=5)
    assert created.status_code == 201
    publish(settings, done_records + missing_records)
    states = settled(settings, [done, missing], worker)
    assert states[done].status is OperationStatus.CONFIRMED
    assert states[done].provider_receipt == created.json()["receipt"]
    emitted = reconciler_records(read_ledger(settings))
    assert isinstance(emitted[done][0], EffectConfirmed) and emitted[done][0].origin == "lookup"
    retry = emitted[missing][0]
    assert isinstance(retry, EffectResolved) and (retry.decision, retry.resolved_by) == (
        "retry",
        "reconciler",
    )
    assert states[missing].status is OperationStatus.PROPOSED
    by_key = provider_stats(url)["by_key"]
    assert by_key.get(done) == 1 and missing not in by_key  # type: ignore[union-attr]


def test_irreversible_without_lookup_becomes_unknown(stack: tuple[Settings, Proc, str]) -> None:
    settings, worker, _ = stack
    op, records = started_operation(conv(), tool="notify", effect_class="irreversible")
    publish(settings, records)
    states = settled(settings, [op], worker)
    assert states[op].status is OperationStatus.UNKNOWN
    (unknown,) = reconciler_records(read_ledger(settings))[op]
    assert isinstance(unknown, EffectUnknown) and "no lookup" in unknown.reason


def test_duplicated_input_gives_one_transition(stack: tuple[Settings, Proc, str]) -> None:
    settings, worker, _ = stack
    op, records = started_operation(conv(), deadline=timedelta(minutes=10))
    receipt = receipt_for(op)
    publish(settings, [*records, *records, (RECEIPTS, receipt), (RECEIPTS, receipt)])
    settled(settings, [op], worker)
    publish(settings, [(RECEIPTS, receipt)])  # a late redelivery after it settled
    wait_until(lambda: worker.alive, 2, "worker alive")
    emitted = reconciler_records(read_ledger(settings))[op]
    assert distinct_transitions(emitted) == {"effect_confirmed": 1}


def test_poison_goes_to_the_dlq_and_the_worker_continues(stack: tuple[Settings, Proc, str]) -> None:
    settings, worker, _ = stack
    publish(settings, [], raw=[(RECEIPTS, b"not avro at all")])
    op, records = started_operation(conv(), tool="notify", effect_class="irreversible")
    publish(settings, records)
    settled(settings, [op], worker)

    def poisoned() -> list:
        return [h for h in read_dlq(settings) if h.get("convdb.consumer") == b"reconciler"]

    (headers,) = wait_until(poisoned, 30, "the poison record in the DLQ")  # type: ignore[misc]
    assert headers["convdb.error.class"] == b"NotAvroError"
    assert headers["convdb.original.topic"] == RECEIPTS.name(settings.namespace).encode()
    assert worker.alive


def test_sigterm_stops_the_worker_cleanly(stack: tuple[Settings, Proc, str]) -> None:
    _, worker, _ = stack
    worker.stop()
    assert worker.proc is not None and worker.proc.returncode == 0, worker.tail()
    assert "Signal received: 15" in worker.log.read_text()
