"""Property tests of the pure operation state machine (`projections/effects.py`)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convdb.projections import effects
from convdb.projections.effects import (
    TRANSITIONS,
    IllegalTransitionError,
    LookupResult,
    OperationStatus,
    ReconcilePolicy,
    decide,
    fold,
    initial,
    on_lookup,
    transition_of,
)
from convdb.schemas import (
    ActionEvent,
    EffectConfirmed,
    EffectFailed,
    EffectProposed,
    EffectResolved,
    EffectStarted,
    EffectUnknown,
    LedgerRecord,
    ObservationEvent,
    Receipt,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CONV = "c1"
OP = f"{CONV}/a1"
POLICY = ReconcilePolicy(receipt_grace=timedelta(seconds=2), max_lookups=2)


def ledger(transition: str, n: int, effect_class: str = "keyed", attempt: int = 1) -> LedgerRecord:
    """A ledger record asking for `transition`, the n-th of the operation."""
    base = {
        "id": f"r{n}-{uuid.uuid4().hex[:6]}",
        "operation_id": OP,
        "conversation_id": CONV,
        "tenant_id": "t",
        "timestamp": T0 + timedelta(seconds=n),
    }
    if transition == "proposed":
        return EffectProposed(
            **base, action_id="a1", tool_name="create_issue", intent_hash="h", target="tracker:issues",
            effect_class=effect_class, reconcile_after=T0 + timedelta(seconds=30),
        )  # fmt: skip
    if transition == "started":
        return EffectStarted(**base, attempt=attempt)
    if transition == "confirmed":
        return EffectConfirmed(**base, provider_receipt="trk-1", result="{}")
    if transition == "failed":
        return EffectFailed(**base, error="no")
    if transition == "unknown":
        return EffectUnknown(**base, reason="?")
    decision = transition.split(":")[1]
    return EffectResolved(**base, decision=decision, resolved_by="alice")


ALL_TRANSITIONS = sorted({t for _, t in TRANSITIONS})


@st.composite
def legal_walks(draw: st.DrawFn) -> list[LedgerRecord]:
    """A random legal ledger history: a walk over `TRANSITIONS` from 'proposed'."""
    effect_class = draw(st.sampled_from(["idempotent", "keyed", "irreversible"]))
    records = [ledger("proposed", 0, effect_class)]
    status: OperationStatus | None = OperationStatus.PROPOSED
    for n in range(1, draw(st.integers(0, 8)) + 1):
        options = sorted(t for (s, t) in TRANSITIONS if s == status)
        transition = draw(st.sampled_from(options))
        records.append(ledger(transition, n, effect_class, attempt=n))
        status = TRANSITIONS[(status, transition)]
    return records


def fold_all(records: list[object]) -> effects.OperationState:
    state = initial(OP)
    for record in records:
        state = fold(state, record)
    return state


def expected_status(records: list[LedgerRecord]) -> OperationStatus | None:
    status = None
    for r in records:
        status = TRANSITIONS[(status, transition_of(r))]
    return status


@given(legal_walks())
def test_is_valid_fold_follows_the_transition_table(records: list[LedgerRecord]) -> None:
    assert fold_all(records).status == expected_status(records)


@given(legal_walks(), st.data())
def test_duplicates_change_nothing(records: list[LedgerRecord], data: st.DataObject) -> None:
    dup_at = data.draw(st.lists(st.integers(0, len(records) - 1), max_size=5))
    noisy: list[LedgerRecord] = []
    for i, r in enumerate(records):
        noisy.append(r)
        noisy.extend([r] * dup_at.count(i))
    # Redelivery may come much later, too (at-least-once after a crash).
    noisy.extend(records[i] for i in dup_at)
    assert fold_all(noisy) == fold_all(records)


@given(legal_walks(), st.sampled_from(ALL_TRANSITIONS))
def test_illegal_transition_raises(records: list[LedgerRecord], transition: str) -> None:
    state = fold_all(records)
    record = ledger(transition, 99)
    if (state.status, transition) in TRANSITIONS:
        assert fold(state, record).status == TRANSITIONS[(state.status, transition)]
    else:
        with pytest.raises(IllegalTransitionError, match=OP):
            fold(state, record)


@given(legal_walks(), st.sampled_from(ALL_TRANSITIONS))
def test_terminal_states_never_change(records: list[LedgerRecord], transition: str) -> None:
    """Confirmed never changes; failed changes only to confirmed, on proof of success; a late
    record (a writer that had not seen the outcome) is never illegal."""
    state = fold_all(records)
    if state.status is None or not state.status.is_terminal:
        return
    after = fold(state, ledger(transition, 99))
    proof = transition in ("confirmed", "resolved:confirmed")
    if state.status is OperationStatus.CONFIRMED or not proof:
        assert after.status == state.status and after.provider_receipt == state.provider_receipt
    else:
        assert after.status is OperationStatus.CONFIRMED


def test_ledger_before_proposal_is_illegal() -> None:
    with pytest.raises(IllegalTransitionError, match="not proposed"):
        fold(initial(OP), ledger("started", 1))


def receipt(status: str = "succeeded", at: datetime = T0 + timedelta(seconds=3)) -> Receipt:
    return Receipt(
        id=uuid.uuid4().hex, provider="tracker", operation_id=OP, conversation_id=CONV, tenant_id="t",
        provider_receipt="trk-7", status=status, result='{"id": 7}', timestamp=at,
    )  # fmt: skip


def executing(effect_class: str = "keyed") -> effects.OperationState:
    return fold_all([ledger("proposed", 0, effect_class), ledger("started", 1, effect_class)])


def test_receipt_confirms_after_the_grace_only() -> None:
    state = fold(executing(), receipt())
    assert decide(state, T0 + timedelta(seconds=4), POLICY, has_resolver=True) == effects.Decision()
    out = decide(state, T0 + timedelta(seconds=5), POLICY, has_resolver=True).emit
    assert len(out) == 1 and isinstance(out[0], EffectConfirmed)
    assert (out[0].origin, out[0].provider_receipt, out[0].result) == ("receipt", "trk-7", '{"id": 7}')
    assert fold(state, out[0]).status is OperationStatus.CONFIRMED


def test_receipt_before_the_ledger_is_kept_as_evidence() -> None:
    early = fold(initial(OP), receipt())
    assert (
        early.status is None and decide(early, T0 + timedelta(hours=1), POLICY, has_resolver=False).emit == ()
    )
    state = fold(fold(early, ledger("proposed", 0)), ledger("started", 1))
    assert isinstance(
        decide(state, T0 + timedelta(seconds=9), POLICY, has_resolver=False).emit[0], EffectConfirmed
    )


def test_failed_receipt_fails_the_operation() -> None:
    state = fold(executing(), receipt("failed"))
    out = decide(state, T0 + timedelta(seconds=9), POLICY, has_resolver=True).emit
    assert isinstance(out[0], EffectFailed) and out[0].origin == "receipt"


def test_deadline_asks_for_a_lookup_or_decides_by_class() -> None:
    before, after = T0 + timedelta(seconds=29), T0 + timedelta(seconds=30)
    assert decide(executing(), before, POLICY, has_resolver=True) == effects.Decision()
    assert decide(executing(), after, POLICY, has_resolver=True).lookup
    retry = decide(executing("idempotent"), after, POLICY, has_resolver=False).emit[0]
    assert isinstance(retry, EffectResolved) and (retry.decision, retry.resolved_by) == (
        "retry",
        "reconciler",
    )
    unknown = decide(executing("irreversible"), after, POLICY, has_resolver=False).emit[0]
    assert isinstance(unknown, EffectUnknown) and unknown.origin == "reconciler"
    assert "irreversible" in unknown.evidence


def test_lookup_answers() -> None:
    now = T0 + timedelta(seconds=31)
    found = on_lookup(
        executing(), LookupResult(outcome="found", provider_receipt="trk-2", result="x"), now, POLICY
    )
    assert isinstance(found[0], EffectConfirmed) and found[0].origin == "lookup"
    missing = on_lookup(executing(), LookupResult(outcome="not_found"), now, POLICY)
    assert isinstance(missing[0], EffectResolved) and missing[0].decision == "retry"
    unsure = LookupResult(outcome="unknown", detail="timeout")
    assert on_lookup(executing("irreversible"), unsure, now, POLICY, failures=0) == ()
    gave_up = on_lookup(executing("irreversible"), unsure, now, POLICY, failures=1)
    assert isinstance(gave_up[0], EffectUnknown) and "timeout" in gave_up[0].evidence
    settled = fold(executing(), ledger("confirmed", 5))
    assert on_lookup(settled, LookupResult(outcome="not_found"), now, POLICY) == ()


def test_retry_gets_a_new_deadline() -> None:
    state = fold_all([ledger("proposed", 0), ledger("started", 1)])
    state = fold(state, decide(state, T0 + timedelta(seconds=40), POLICY, has_resolver=False).emit[0])
    assert state.status is OperationStatus.PROPOSED
    state = fold(state, ledger("started", 100, attempt=2))
    assert state.reconcile_after == T0 + timedelta(seconds=130)
    assert decide(state, T0 + timedelta(seconds=129), POLICY, has_resolver=False).emit == ()


@settings(max_examples=200)
@given(
    legal_walks(),
    st.booleans(),
    st.booleans(),
    st.integers(0, 120),
    st.sampled_from(["found", "not_found", "unknown"]),
)
def test_emitted_transitions_are_legal_and_idempotent(
    records: list[LedgerRecord], with_receipt: bool, resolver: bool, seconds: int, outcome: str
) -> None:
    state = fold_all([*records, receipt()] if with_receipt else records)
    now = T0 + timedelta(seconds=seconds)
    decision = decide(state, now, POLICY, has_resolver=resolver)
    out = list(decision.emit)
    if decision.lookup:
        out += on_lookup(state, LookupResult(outcome=outcome), now, POLICY, failures=5)
    for record in out:
        after = fold(state, record)  # never raises: the machine only emits legal transitions
        assert after.status != state.status or after.status is OperationStatus.EXECUTING
        # The same decision again is the same record: readers drop it by id.
        assert fold(after, record) == after
        again = decide(after, now, POLICY, has_resolver=resolver).emit
        assert record.id not in {r.id for r in again}


def test_intent_and_observation_are_recorded() -> None:
    action = ActionEvent(
        id="a1", conversation_id=CONV, tenant_id="t", seq=3, timestamp=T0, source="agent",
        tool_name="create_issue", tool_call_id="call-1", arguments='{"title":"x"}', llm_response_id="r",
        operation_id=OP, intent_hash="h", target="tracker:issues", effect_class="keyed",
    )  # fmt: skip
    obs = ObservationEvent(
        id="o1", conversation_id=CONV, tenant_id="t", seq=4, timestamp=T0, source="environment",
        action_id="a1", tool_name="create_issue", tool_call_id="call-1", content="ok",
    )  # fmt: skip
    assert effects.operation_id_of(obs) == OP
    state = fold_all([action, ledger("proposed", 1), obs])
    assert (state.arguments, state.tool_call_id, state.observed) == ('{"title":"x"}', "call-1", True)


def test_backfill_observation_from_receipt_evidence() -> None:
    state = fold(executing(), receipt())
    state = fold(state, decide(state, T0 + timedelta(seconds=9), POLICY, has_resolver=False).emit[0])
    obs = effects.backfill_observation(state, event_id="o9", seq=7, parent_id="a1", timestamp=T0)
    assert (obs.backfilled, obs.provider_receipt, obs.source, obs.seq) == (True, "trk-7", "environment", 7)
    with pytest.raises(IllegalTransitionError):
        effects.backfill_observation(executing(), event_id="o", seq=1, parent_id=None, timestamp=T0)
