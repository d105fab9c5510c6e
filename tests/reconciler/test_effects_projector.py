"""The effects projector on a real SQLite store: ledger per operation, counts, queue, run facts."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from convdb.consumers.base import ConsumedRecord, Rejection
from convdb.consumers.effects import (
    EffectsConsumer,
    conversation_status,
    counts_by_status,
    get_operation,
    list_operations,
    operation_ledger,
)
from convdb.consumers.store import ensure_projections, open_engine
from convdb.schemas import (
    ActionEvent,
    AvroModel,
    EffectConfirmed,
    EffectUnknown,
    MessageEvent,
    StateUpdateEvent,
)
from tests.helpers import now
from tests.reconciler.ledger import receipt_for, started_operation


def consumed(values: list[AvroModel], start: int = 0) -> list[ConsumedRecord]:
    return [
        ConsumedRecord("t", 0, start + i, 0, v.conversation_id, v)  # type: ignore[attr-defined]
        for i, v in enumerate(values)
    ]


@pytest.fixture
def engine(tmp_path: Path) -> sa.Engine:
    engine = open_engine(f"sqlite:///{tmp_path / 'store.db'}")
    ensure_projections(engine, [EffectsConsumer()])
    return engine


def apply(engine: sa.Engine, values: list[AvroModel], start: int = 0) -> Sequence[Rejection]:
    with engine.begin() as conn:
        return EffectsConsumer().apply(conn, consumed(values, start))


def action_for(op: str, seq: int = 2) -> ActionEvent:
    conv, action_id = op.rsplit("/", 1)
    return ActionEvent(
        id=action_id, conversation_id=conv, tenant_id="acme", seq=seq, timestamp=now(), source="agent",
        tool_name="notify", tool_call_id="call-1", arguments='{"text":"hi","to":"bob"}', llm_response_id="r",
        operation_id=op, intent_hash="h", target="notify:bob", effect_class="irreversible",
    )  # fmt: skip


def test_queue_counts_and_duplicates(engine: sa.Engine) -> None:
    op, records = started_operation("c1", tool="notify", effect_class="irreversible")
    unknown = EffectUnknown(
        id="u1", operation_id=op, conversation_id="c1", tenant_id="acme", timestamp=now(),
        reason="no lookup", evidence="irreversible", origin="reconciler",
    )  # fmt: skip
    ledger = [r for _, r in records]
    apply(engine, [action_for(op), *ledger, unknown])
    apply(engine, [*ledger, unknown], start=10)  # redelivered: nothing changes
    with engine.connect() as conn:
        (queued,) = list_operations(conn, "acme", "unknown", None, 50)
        assert list_operations(conn, "other-tenant", "unknown", None, 50) == []
        assert queued.arguments == '{"text":"hi","to":"bob"}' and queued.tool_name == "notify"
        assert counts_by_status(conn, "acme") == {
            "proposed": 0, "executing": 0, "confirmed": 0, "failed": 0, "unknown": 1,
        }  # fmt: skip
        assert [e["kind"] for e in operation_ledger(conn, op)] == [
            "effect_proposed", "effect_started", "effect_unknown",
        ]  # fmt: skip


def test_illegal_transition_is_rejected_for_the_dlq(engine: sa.Engine) -> None:
    op, records = started_operation("c2")
    confirmed = EffectConfirmed(
        id="k1", operation_id=op, conversation_id="c2", tenant_id="acme", timestamp=now()
    )
    apply(engine, [r for _, r in records] + [confirmed])
    from convdb.schemas import EffectStarted

    # A transition of an operation nobody proposed is data no writer produces: the DLQ.
    stray = EffectStarted(
        id="s8", operation_id="c2/never", conversation_id="c2", tenant_id="acme", timestamp=now()
    )
    rejected = apply(engine, [stray], start=5)
    assert [r.record.value for r in rejected] == [stray]
    assert re.search("started is not allowed when not proposed", str(rejected[0].error))
    # A late attempt after the outcome (a runner that had not seen it) is not poison: no change.
    restart = EffectStarted(id="s9", operation_id=op, conversation_id="c2", tenant_id="acme", timestamp=now())
    apply(engine, [restart], start=6)
    with engine.connect() as conn:
        assert get_operation(conn, op).status == "confirmed"  # type: ignore[union-attr]
        assert get_operation(conn, "c2/never") is None


def test_three_separate_states_per_conversation(engine: sa.Engine) -> None:
    op, records = started_operation("c3", deadline=timedelta(minutes=5))

    def update(seq: int, status: str) -> StateUpdateEvent:
        return StateUpdateEvent(
            id=f"s{seq}", conversation_id="c3", tenant_id="acme", seq=seq, timestamp=now(),
            source="environment", execution_status=status,
        )  # fmt: skip

    answer = MessageEvent(
        id="m5", conversation_id="c3", tenant_id="acme", seq=5, timestamp=now(), source="agent",
        role="assistant", content="done!",
    )  # fmt: skip
    apply(engine, [update(1, "running"), action_for(op, 2), *[r for _, r in records], answer])
    with engine.connect() as conn:
        status = conversation_status(conn, "c3")
    # The agent says it is done, but the loop still runs and the issue is not confirmed yet.
    assert status is not None
    assert (status["agent_says_done"], status["run_loop_stopped"], status["effects_all_confirmed"]) == (
        True, False, False,
    )  # fmt: skip
    apply(engine, [update(6, "finished"), receipt_for(op)], start=20)
    confirmed = EffectConfirmed(
        id="k3", operation_id=op, conversation_id="c3", tenant_id="acme", timestamp=now(), origin="receipt"
    )
    apply(engine, [confirmed], start=30)
    with engine.connect() as conn:
        status = conversation_status(conn, "c3")
    assert status is not None
    assert (status["run_loop_stopped"], status["effects_all_confirmed"]) == (True, True)
    assert status["effects"]["confirmed"] == 1
