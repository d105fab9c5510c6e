"""Every user of the operation machine folds the same ledger to the same states.

Random ledger sequences (any transition in any order, duplicates, records before the proposal,
receipts, two interleaved operations) go through the three users: the runtime's ledger (what
resume decides on), the reconciler's core (its table, with a DLQ for refused records) and the
effects read side (its store, with rejected records left out, as the runner's DLQ does).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from convdb.consumers.base import ConsumedRecord
from convdb.consumers.effects import EffectsConsumer, load_operations
from convdb.consumers.reconciler import Reconciler
from convdb.producers.ledger import EMPTY, fold_ledger
from convdb.projections.operation import OperationState
from convdb.projections.settlement import next_step
from convdb.schemas import (
    AvroModel,
    EffectConfirmed,
    EffectFailed,
    EffectProposed,
    EffectResolved,
    EffectStarted,
    EffectUnknown,
    Receipt,
    SingleObjectCodec,
)
from convdb.schemas.topics import EFFECTS, RECEIPTS
from tests.conftest import settings_for

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CONV = "c-agree"
OPS = (f"{CONV}/a1", f"{CONV}/a2")
KINDS = (
    "proposed", "started", "confirmed", "failed", "unknown",
    "resolved:confirmed", "resolved:failed", "resolved:retry", "receipt",
)  # fmt: skip
CODEC = SingleObjectCodec()


def build(kind: str, op: str, n: int, attempt: int) -> AvroModel:
    """A record of `kind` about `op`, the n-th of the sequence."""
    base = {
        "id": f"r{n}-{uuid.uuid4().hex[:8]}", "operation_id": op, "conversation_id": CONV, "tenant_id": "t",
        "timestamp": T0 + timedelta(seconds=n),
    }  # fmt: skip
    match kind:
        case "proposed":
            return EffectProposed(
                **base, action_id=op.rsplit("/", 1)[1], tool_name="create_issue", intent_hash="h",
                target=None, effect_class="keyed", reconcile_after=T0 + timedelta(seconds=30),
            )  # fmt: skip
        case "started":
            return EffectStarted(**base, attempt=attempt)
        case "confirmed":
            return EffectConfirmed(**base, provider_receipt=f"trk-{n}", result="{}", origin="lookup")
        case "failed":
            return EffectFailed(**base, error="rejected")
        case "unknown":
            return EffectUnknown(**base, reason="?", evidence="e")
        case "receipt":
            return Receipt(**base, provider="tracker", provider_receipt=f"trk-r{n}", status="succeeded")
    return EffectResolved(**base, decision=kind.split(":")[1], resolved_by="human:t")


@st.composite
def ledgers(draw: st.DrawFn) -> list[AvroModel]:
    """A random sequence: mostly starting with a proposal, then any records, some repeated."""
    records: list[AvroModel] = []
    for op in draw(st.lists(st.sampled_from(OPS), min_size=1, max_size=2, unique=True)):
        if draw(st.booleans()) or draw(st.booleans()):
            records.append(build("proposed", op, len(records), 1))
    for _ in range(draw(st.integers(0, 12))):
        if records and draw(st.integers(0, 5)) == 0:
            records.append(draw(st.sampled_from(records)))  # an at-least-once redelivery
            continue
        kind, op = draw(st.sampled_from(KINDS)), draw(st.sampled_from(OPS))
        records.append(build(kind, op, len(records), draw(st.integers(1, 4))))
    return records


def through_resume(records: list[AvroModel]) -> dict[str, OperationState]:
    ledger = EMPTY
    for record in records:
        ledger = fold_ledger(ledger, record)  # type: ignore[arg-type]
    return dict(ledger.items())


def through_reconciler(records: list[AvroModel]) -> tuple[dict[str, OperationState], int]:
    dead: list[bytes] = []

    async def send(suffix: str, key: bytes, value: bytes, headers: object) -> None:  # noqa: ARG001
        if suffix == "dlq":
            dead.append(value)

    table: dict[bytes, bytes] = {}
    core = Reconciler(settings_for(), CODEC, table, send, {})

    async def feed() -> None:
        for offset, record in enumerate(records):
            topic = RECEIPTS if isinstance(record, Receipt) else EFFECTS
            await core.ingest(topic.name("t"), 0, offset, CONV.encode(), CODEC.encode(record))

    asyncio.run(feed())
    states = {k.decode(): OperationState.model_validate_json(v) for k, v in table.items()}
    return states, len(dead)


@contextmanager
def store() -> Iterator[sa.Connection]:
    engine = sa.create_engine("sqlite://")
    with engine.begin() as conn:
        EffectsConsumer().create(conn)
        yield conn
    engine.dispose()


def through_read_side(records: list[AvroModel]) -> tuple[dict[str, OperationState], int]:
    rejected = 0
    with store() as conn:
        projector = EffectsConsumer()
        for offset, record in enumerate(records):
            consumed = ConsumedRecord("t", 0, offset, 0, CONV, record)
            # A refused record is returned, not written: the runner sends it to the DLQ.
            rejected += len(projector.apply(conn, [consumed]))
        return load_operations(conn, list(OPS)), rejected


@settings(max_examples=150)
@given(ledgers())
def test_resume_reconciler_and_read_side_agree(records: list[AvroModel]) -> None:
    resume = through_resume(records)
    reconciler, dead = through_reconciler(records)
    read_side, rejected = through_read_side(records)
    assert resume == reconciler == read_side
    assert dead == rejected  # the same records are refused by both consumers
    for op, state in resume.items():
        # What resume would do is decided on the very state the human queue and the reconciler see.
        assert next_step(state) is next_step(read_side[op])
