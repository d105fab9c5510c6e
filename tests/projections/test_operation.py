"""The operation machine's decided transitions and the settlement rules (`convdb.projections.operation`,
`convdb.projections.settlement`): the cases the runtime's and the reconciler's folds used to disagree on."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from convdb.projections.errors import IllegalTransitionError
from convdb.projections.operation import OperationState, OperationStatus, fold, initial
from convdb.projections.settlement import MAX_ATTEMPTS, LookupResult, Step, next_step, settle
from convdb.schemas import (
    EffectConfirmed,
    EffectFailed,
    EffectProposed,
    EffectResolved,
    EffectStarted,
    EffectUnknown,
    LedgerRecord,
    Receipt,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
OP = "c1/a1"


def record(kind: str, n: int = 1, effect_class: str = "keyed", attempt: int = 1) -> LedgerRecord:
    base = {
        "id": f"r{n}-{uuid.uuid4().hex[:6]}", "operation_id": OP, "conversation_id": "c1",
        "tenant_id": "t", "timestamp": T0 + timedelta(seconds=n),
    }  # fmt: skip
    match kind:
        case "proposed":
            return EffectProposed(
                **base, action_id="a1", tool_name="create_issue", intent_hash="h", target=None,
                effect_class=effect_class, reconcile_after=T0 + timedelta(seconds=30),
            )  # fmt: skip
        case "started":
            return EffectStarted(**base, attempt=attempt)
        case "confirmed":
            return EffectConfirmed(**base, provider_receipt="trk-1", result="{}")
        case "failed":
            return EffectFailed(**base, error="rejected")
        case "unknown":
            return EffectUnknown(**base, reason="?")
    return EffectResolved(**base, decision=kind.split(":")[1], resolved_by="human:t", note="checked")


def walk(*kinds: str, effect_class: str = "keyed") -> OperationState:
    state = initial(OP)
    for n, kind in enumerate(kinds):
        state = fold(state, record(kind, n, effect_class, attempt=kinds[: n + 1].count("started")))
    return state


def test_started_failed_confirmed_is_confirmed() -> None:
    # Proof of success beats an earlier error report (provider mutations == confirmed operations).
    state = walk("proposed", "started", "failed", "confirmed")
    assert state.status is OperationStatus.CONFIRMED and state.provider_receipt == "trk-1"
    assert walk("proposed", "started", "failed", "resolved:confirmed").status is OperationStatus.CONFIRMED


def test_started_resolved_confirmed_is_confirmed() -> None:
    # A resolution settles any open operation, executing included.
    assert walk("proposed", "started", "resolved:confirmed").status is OperationStatus.CONFIRMED
    assert walk("proposed", "started", "resolved:failed").status is OperationStatus.FAILED
    assert walk("proposed", "resolved:confirmed").status is OperationStatus.CONFIRMED


def test_started_unknown_started_is_executing() -> None:
    # A new attempt is newer than the conclusion that nobody knows: in flight again, new deadline.
    state = walk("proposed", "started", "unknown", "started")
    assert state.status is OperationStatus.EXECUTING and state.attempt == 2
    assert next_step(state) is Step.SETTLE


def test_the_runners_record_of_a_human_decision_keeps_who_decided_and_their_note() -> None:
    for decision in ("confirmed", "failed", "retry"):
        human = walk("proposed", "started", "unknown", f"resolved:{decision}")
        echo = record(f"resolved:{decision}", 9).model_copy(
            update={"resolved_by": "runner", "note": "resolved via inbox i1"}
        )
        state = fold(human, echo)
        assert (state.decision, state.resolved_by, state.note) == (decision, "human:t", "checked"), decision
        assert state.status is human.status and echo.id in state.applied
    # A later decision (after the retry went unknown again) is a new one: its author and note count.
    again = walk("proposed", "started", "unknown", "resolved:retry", "started", "unknown")
    later = record("resolved:retry", 9).model_copy(update={"resolved_by": "human:u", "note": "twice"})
    assert (fold(again, later).resolved_by, fold(again, later).note) == ("human:u", "twice")


def test_late_records_never_undo_an_outcome_nor_go_to_the_dlq() -> None:
    for late in ("proposed", "started", "failed", "unknown", "resolved:failed", "resolved:retry"):
        state = walk("proposed", "started", "confirmed", late)
        assert state.status is OperationStatus.CONFIRMED and state.provider_receipt == "trk-1", late
    for late in ("proposed", "started", "unknown", "resolved:retry", "resolved:failed"):
        assert walk("proposed", "started", "failed", late).status is OperationStatus.FAILED, late


def test_a_repeated_proposal_never_resets_an_attempt_in_flight() -> None:
    state = walk("proposed", "started", "proposed")
    assert state.status is OperationStatus.EXECUTING and state.attempt == 1


def test_only_a_record_about_an_unproposed_operation_is_illegal() -> None:
    for kind in ("started", "confirmed", "failed", "unknown", "resolved:confirmed", "resolved:retry"):
        with pytest.raises(IllegalTransitionError, match="not proposed"):
            fold(initial(OP), record(kind))


def test_a_stale_started_never_lowers_the_attempt_count() -> None:
    state = walk("proposed", "started", "started", "started")
    assert fold(state, record("started", 9, attempt=1)).attempt == 3


def executing(effect_class: str, attempts: int = 1) -> OperationState:
    return walk("proposed", *["started"] * attempts, effect_class=effect_class)


def test_settle_found_confirms() -> None:
    found = LookupResult(outcome="found", provider_receipt="trk-9", result="{}")
    verdict = settle(executing("irreversible"), found)
    assert (verdict.action, verdict.provider_receipt) == ("confirm", "trk-9")


def test_settle_retries_what_cannot_duplicate_and_asks_a_human_otherwise() -> None:
    not_found = LookupResult(outcome="not_found")
    unknown = LookupResult(outcome="unknown", detail="timeout")
    assert settle(executing("keyed"), None).action == "retry"
    assert settle(executing("idempotent"), unknown).action == "retry"
    assert settle(executing("irreversible"), not_found).action == "retry"  # provably not done
    assert settle(executing("irreversible"), None).action == "unknown"
    assert settle(executing("irreversible"), unknown).action == "unknown"
    assert settle(executing("irreversible"), unknown, may_ask_again=True).action == "ask_again"


def test_settle_gives_up_after_max_attempts() -> None:
    verdict = settle(executing("keyed", MAX_ATTEMPTS), LookupResult(outcome="not_found"))
    assert verdict.action == "unknown" and f"gave up after {MAX_ATTEMPTS} attempts" in verdict.detail
    assert settle(executing("keyed", MAX_ATTEMPTS - 1), None).action == "retry"


def test_recovery_steps() -> None:
    assert next_step(None) is Step.EXECUTE
    assert next_step(walk("proposed")) is Step.EXECUTE
    assert next_step(walk("proposed", "started", "resolved:retry")) is Step.EXECUTE
    assert next_step(walk("proposed", "started")) is Step.SETTLE
    assert next_step(walk("proposed", "started", "unknown")) is Step.WAIT_HUMAN
    assert next_step(walk("proposed", "started", "failed")) is Step.BACKFILL
    receipt = Receipt(
        id="x", provider="tracker", operation_id=OP, conversation_id="c1", tenant_id="t",
        provider_receipt="trk-2", status="succeeded", result="{}", timestamp=T0,
    )  # fmt: skip
    assert next_step(fold(walk("proposed", "started", "unknown"), receipt)) is Step.BACKFILL


def test_another_tenants_receipt_or_ledger_record_is_refused_and_the_runner_ignores_it() -> None:
    from convdb.producers.ledger import EMPTY, fold_ledger
    from convdb.projections.errors import TenantMismatchError
    from convdb.schemas import EffectConfirmed, EffectProposed, Receipt

    t = datetime(2026, 1, 1, tzinfo=UTC)
    mine = {"operation_id": "c1/a1", "conversation_id": "c1", "tenant_id": "acme", "timestamp": t}
    proposed = EffectProposed(id="p1", action_id="a1", tool_name="write_file", intent_hash="h",
                              effect_class="idempotent", reconcile_after=t, **mine)  # fmt: skip
    state = fold(initial("c1/a1"), proposed)
    theirs = {**mine, "tenant_id": "umbrella"}
    receipt = Receipt(id="r1", provider="files", provider_receipt="x", status="succeeded", **theirs)
    confirmed = EffectConfirmed(id="k1", **theirs)
    for record in (receipt, confirmed):
        with pytest.raises(TenantMismatchError, match="another tenant"):
            fold(state, record)
    ledger = fold_ledger(fold_ledger(EMPTY, proposed), receipt)
    assert ledger["c1/a1"] == state  # the runner folds the same machine and ignores it
    # A receipt parked before its proposal named another tenant: the ledger's tenant wins.
    parked = fold(initial("c1/a1"), receipt)
    assert fold(parked, proposed).tenant_id == "acme" and fold(parked, proposed).receipt is None
