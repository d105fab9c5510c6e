"""How the console tells an operation's settlement and a runner takeover from the ledger (pure)."""

from __future__ import annotations

from typing import Any

from convdb.consumers.console.crash import headline, place, reason_and_detail, takeovers


def rec(kind: str, by: str, second: int) -> dict[str, Any]:
    return {"kind": kind, "by": by, "timestamp": f"2026-01-01T00:00:{second:02d}+00:00", "record": {}}


def op(status: str, *ledger: dict[str, Any], resolution: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "operation_id": "c/a1",
        "status": status,
        "intent": {"tool": "create_issue"},
        "evidence": {"reason": None, "detail": None},
        "resolution": resolution,
        "ledger": list(ledger),
    }


def test_a_call_killed_mid_flight_and_confirmed_by_lookup_is_a_takeover() -> None:
    killed = op(
        "confirmed",
        rec("effect_proposed", "runner", 1),
        rec("effect_started", "runner", 2),
        rec("effect_confirmed", "lookup", 23),
    )
    assert headline(killed) == "Confirmed by lookup (the provider was asked whether it happened)"
    reason, detail = reason_and_detail(killed)
    assert (
        reason.startswith("Recorded by lookup")
        and "1 attempt;" in detail
        and "effect_started by the runner" in detail
    )
    (marker,) = takeovers([killed])
    assert marker["at"].endswith(":23+00:00") and marker["gap_s"] == 21
    assert "stopped during the call" in marker["text"] and "21 s later" in marker["text"]
    assert "confirmed it by lookup" in marker["text"]
    events = [
        {"id": "e1", "timestamp": "2026-01-01T00:00:02+00:00"},
        {"id": "e2", "timestamp": "2026-01-01T00:00:30Z"},
    ]
    assert place([marker], events) == {"e2": [marker]}
    assert place([marker], events[:1]) == {None: [marker]}


def test_a_normal_call_is_settled_by_the_call_and_has_no_marker_and_no_blank_evidence() -> None:
    normal = op("confirmed", rec("effect_started", "runner", 1), rec("effect_confirmed", "runner", 2))
    assert headline(normal) == "Confirmed by the call (the tool answered the runner)"
    reason, detail = reason_and_detail(normal)
    assert reason and detail and "nothing was in doubt" in reason
    assert takeovers([normal]) == []
    assert reason_and_detail(op("proposed"))[0].startswith("No outcome yet")


def test_a_human_decision_names_who_and_an_unknown_waits_for_one() -> None:
    unknown = op("unknown", rec("effect_started", "runner", 1), rec("effect_unknown", "lookup", 9))
    assert headline(unknown) == "Unknown · waiting for a human to decide (recorded by lookup)"
    assert "handed it to a human by lookup" in takeovers([unknown])[0]["text"]
    by_runner = op("unknown", rec("effect_started", "runner", 1), rec("effect_unknown", "runner", 9))
    assert "handed it to a human (recorded by the runner that took over)" in takeovers([by_runner])[0]["text"]
    decided = op(
        "confirmed",
        rec("effect_started", "runner", 1),
        rec("effect_unknown", "lookup", 9),
        rec("effect_resolved", "human:demo:Ada", 30),
        rec("effect_started", "runner", 31),
        rec("effect_confirmed", "runner", 32),
        resolution={"decision": "retry", "by": "human:demo:Ada", "note": "ops never got it"},
    )
    assert (
        headline(decided) == "Confirmed · decided by a human, Ada (tenant demo): retry — “ops never got it”"
    )
    assert len(takeovers([decided])) == 1  # the stopped first attempt; the retry ran normally


def test_a_childs_report_settles_its_operation_without_a_takeover_marker() -> None:
    child = op(
        "confirmed",
        rec("effect_proposed", "runner", 1),
        rec("effect_started", "runner", 1),
        rec("effect_confirmed", "receipt", 40),
    )
    assert len(takeovers([child])) == 1  # an ordinary tool settled by a late receipt: a takeover
    assert takeovers([{**child, "target": "conversation:c-child-0"}]) == []
