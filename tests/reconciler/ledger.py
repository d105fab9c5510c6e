"""Test helpers: build ledger inputs, publish them, read the effects ledger back (not fixtures)."""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from datetime import datetime, timedelta

from confluent_kafka import Producer

from convdb.infra.kafka import producer_config
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.projections import effects
from convdb.schemas import (
    AvroModel,
    EffectProposed,
    EffectStarted,
    LedgerRecord,
    Receipt,
    SingleObjectCodec,
)
from convdb.schemas.topics import DLQ, EFFECTS, RECEIPTS, Topic
from tests.helpers import now

CODEC = SingleObjectCodec()


def publish(
    settings: Settings, records: list[tuple[Topic, AvroModel]], raw: list[tuple[Topic, bytes]] = ()
) -> None:
    """Publish records (keyed by conversation) and wait until durable."""
    producer = Producer(producer_config(settings))
    for topic, record in records:
        key = record.conversation_id  # type: ignore[attr-defined]
        producer.produce(topic.name(settings.namespace), CODEC.encode(record), key)
    for topic, value in raw:
        producer.produce(topic.name(settings.namespace), value, "poison")
    if producer.flush(30) != 0:
        raise RuntimeError("test publish not acknowledged")


def started_operation(
    conversation_id: str,
    tool: str = "create_issue",
    effect_class: str = "keyed",
    deadline: timedelta = timedelta(seconds=-1),
    tenant: str = "acme",
) -> tuple[str, list[tuple[Topic, AvroModel]]]:
    """An operation whose runner proposed and started it (and then vanished)."""
    action_id = uuid.uuid4().hex[:12]
    op = f"{conversation_id}/{action_id}"
    base = {"operation_id": op, "conversation_id": conversation_id, "tenant_id": tenant}
    t = now()
    proposed = EffectProposed(
        id=str(uuid.uuid4()), timestamp=t, action_id=action_id, tool_name=tool, intent_hash="h",
        target="tracker:issues", effect_class=effect_class, reconcile_after=t + deadline, **base,
    )  # fmt: skip
    started = EffectStarted(id=str(uuid.uuid4()), timestamp=t, attempt=1, **base)
    return op, [(EFFECTS, proposed), (EFFECTS, started)]


def receipt_for(
    op: str, tenant: str = "acme", provider_receipt: str = "trk-1", at: datetime | None = None
) -> Receipt:
    """A succeeded provider receipt."""
    return Receipt(
        id=str(uuid.uuid4()), provider="tracker", operation_id=op, conversation_id=op.rsplit("/", 1)[0],
        tenant_id=tenant, provider_receipt=provider_receipt, status="succeeded", result='{"id": 1}',
        timestamp=at or now(),
    )  # fmt: skip


def read_ledger(settings: Settings) -> list[LedgerRecord]:
    """Every record on the effects topic, decoded, in per-partition order."""
    return [CODEC.decode(m.value()) for m in read_topic(settings, EFFECTS.name(settings.namespace))]


def read_dlq(settings: Settings) -> list[dict[str, bytes]]:
    """Headers of every DLQ record."""
    return [dict(m.headers() or []) for m in read_topic(settings, DLQ.name(settings.namespace))]


def reconciler_records(ledger: list[LedgerRecord]) -> dict[str, list[LedgerRecord]]:
    """Transitions the reconciler emitted, by operation (duplicates by id kept)."""
    out: dict[str, list[LedgerRecord]] = defaultdict(list)
    for r in ledger:
        by = getattr(r, "origin", None) or getattr(r, "resolved_by", None)
        if by in ("reconciler", "receipt", "lookup"):
            out[r.operation_id].append(r)
    return out


def distinct_transitions(records: list[LedgerRecord]) -> Counter[str]:
    """How many *distinct* records (by id) of each kind: readers drop repeated ids."""
    return Counter(r.kind for r in {r.id: r for r in records}.values())


def fold_ledger(ledger: list[LedgerRecord]) -> dict[str, effects.OperationState]:
    """The operations' states as any reader folds them."""
    states: dict[str, effects.OperationState] = {}
    for r in ledger:
        states[r.operation_id] = effects.fold(
            states.get(r.operation_id) or effects.initial(r.operation_id), r
        )
    return states


__all__ = ["RECEIPTS", "EFFECTS"]
