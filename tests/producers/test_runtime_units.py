"""Pure parts of the runtime: scripted model, chat messages, ledger fold, secrets, status machine."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from convdb.producers.agent import Condenser
from convdb.producers.errors import IllegalTransitionError
from convdb.producers.ledger import EMPTY, fold_ledger
from convdb.producers.messages import to_messages
from convdb.producers.scripted import parse_plan, scripted_turn
from convdb.producers.secrets import SecretsRegistry
from convdb.producers.status import check_transition
from convdb.projections.settlement import Step, may_retry, next_step
from convdb.schemas import (
    ActionEvent,
    AgentErrorEvent,
    EffectProposed,
    EffectStarted,
    EffectUnknown,
    Event,
    LLMUsageEvent,
    MessageEvent,
    ObservationEvent,
    UserRejectEvent,
)


def env(seq: int, source: str = "agent") -> dict[str, object]:
    return {
        "id": f"e{seq}", "conversation_id": "c", "tenant_id": "t", "seq": seq,
        "timestamp": datetime.now(UTC), "source": source, "parent_id": f"e{seq - 1}" if seq > 1 else None,
    }  # fmt: skip


def test_scripted_model_is_deterministic_and_follows_the_plan() -> None:
    plan = '!read_file {"path": "a"}\n!write_file {"path": "b", "content": "{{last}}"}\n+notify {}'
    assert parse_plan(plan) == [
        [("read_file", '{"path": "a"}')],
        [("write_file", '{"path": "b", "content": "{{last}}"}'), ("notify", "{}")],
    ]
    messages = [{"role": "user", "content": plan}]
    first = scripted_turn(messages)
    assert first == scripted_turn(messages)
    assert first["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "read_file"
    messages += [first["choices"][0]["message"], {"role": "tool", "tool_call_id": "call_1_1", "content": "X"}]
    second = scripted_turn(messages)["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in second] == ["write_file", "notify"]
    assert '"content": "X"' in second[0]["function"]["arguments"]


def test_bad_call_keeps_its_turn_so_every_tool_result_follows_its_call() -> None:
    action = ActionEvent(
        **env(3), tool_name="read_file", tool_call_id="k1", arguments="{}", llm_response_id="r",
        operation_id="c/e3", intent_hash="h", effect_class="read_only",
    )  # fmt: skip
    events = [
        MessageEvent(**env(1, "user"), role="user", content="go"),
        LLMUsageEvent(
            **env(2), model="m", llm_response_id="r", prompt_tokens=1, completion_tokens=1, latency_ms=1
        ),
        action,
        AgentErrorEvent(**env(4), error="bad", tool_name="x", tool_call_id="k2"),
        ObservationEvent(
            **env(5, "environment"), action_id="e3", tool_name="read_file", tool_call_id="k1", content="ok"
        ),
    ]
    messages = to_messages(events)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["k1", "k2"]
    assert {m["tool_call_id"] for m in messages[2:]} == {"k1", "k2"}


def ledger(kind: type, **fields: object) -> object:
    base = {"id": str(uuid.uuid4()), "operation_id": "c/a", "conversation_id": "c", "tenant_id": "t",
            "timestamp": datetime.now(UTC)}  # fmt: skip
    return kind(**base, **fields)


def test_ledger_fold_and_recovery_steps() -> None:
    ops = EMPTY
    assert next_step(None) is Step.EXECUTE
    proposed = ledger(EffectProposed, action_id="a", tool_name="notify", intent_hash="h",
                      effect_class="irreversible", reconcile_after=datetime.now(UTC))  # fmt: skip
    ops = fold_ledger(ops, proposed)
    assert next_step(ops["c/a"]) is Step.EXECUTE
    ops = fold_ledger(ops, ledger(EffectStarted, attempt=1))
    assert next_step(ops["c/a"]) is Step.SETTLE
    ops = fold_ledger(ops, ledger(EffectUnknown, reason="?"))
    ops = fold_ledger(ops, ledger(EffectUnknown, reason="again"))  # a repeated transition changes nothing
    assert ops["c/a"].status == "unknown" and next_step(ops["c/a"]) is Step.WAIT_HUMAN
    assert may_retry("keyed", False) and may_retry("idempotent", False)
    assert not may_retry("irreversible", False) and may_retry("irreversible", True)


def test_secrets_are_redacted_and_revealed() -> None:
    secrets = SecretsRegistry({"TOKEN": "abc123", "LONG": "abc123456"})
    assert secrets.redact("x abc123456 y abc123") == "x <secret:LONG> y <secret:TOKEN>"
    assert secrets.reveal("use <secret:TOKEN> and <secret:OTHER>") == "use abc123 and <secret:OTHER>"
    message = MessageEvent(**env(1, "user"), role="user", content="key abc123")
    assert secrets.redact_record(message).content == "key <secret:TOKEN>"
    with pytest.raises(ValueError):
        secrets.register("EMPTY", "")


def test_status_machine() -> None:
    # The partitioner's vectors moved with it: tests/infra/test_io.py.
    check_transition("c", "idle", "running")
    with pytest.raises(IllegalTransitionError, match="cannot go from waiting_for_human to finished"):
        check_transition("c", "waiting_for_human", "finished")


def laid_out(layout: str) -> list[Event]:
    """A view from a layout: `m` a message, `a` an action, `o` the observation of the oldest action
    not yet answered, `r` the user's rejection of it."""
    view: list[Event] = []
    waiting: list[str] = []
    for seq, mark in enumerate(layout, 1):
        if mark == "m":
            view.append(MessageEvent(**env(seq, "user"), role="user", content=f"m{seq}"))
        elif mark == "a":
            view.append(
                ActionEvent(
                    **env(seq),
                    tool_name="t",
                    tool_call_id=f"k{seq}",
                    arguments="{}",
                    llm_response_id="r",
                    operation_id=f"c/e{seq}",
                    intent_hash="h",
                    effect_class="read_only",
                )  # fmt: skip
            )
            waiting.append(f"e{seq}")
        elif mark == "o":
            action_id = waiting.pop(0)
            view.append(
                ObservationEvent(
                    **env(seq, "environment"),
                    action_id=action_id,
                    tool_name="t",
                    tool_call_id="k",
                    content="ok",
                )
            )
        else:
            view.append(UserRejectEvent(**env(seq, "user"), action_id=waiting.pop(0), reason="no"))
    return view


@pytest.mark.parametrize(
    ("layout", "forgotten"),
    [
        ("mmmmmmaommmmm", "mmmm"),  # the cut falls between an action and its observation
        ("mmmmmaommmmmm", "mmmao"),  # the cut falls after the observation: both go
        ("mmmammmommmmm", "m"),  # other events between the action and its observation
        ("mmmmaaoommmmm", "mm"),  # parallel actions, the cut between their observations
        ("mmmmaarommmmm", "mm"),  # the same, one answered by the user's rejection
        ("mmmmmmammmmmm", "mmmma"),  # an action without an answer leaves nothing behind
    ],
)
def test_the_condenser_never_forgets_an_action_without_its_answer(layout: str, forgotten: str) -> None:
    """Of 13 events the first 2 and the last 6 are kept; the cut moves back before any action whose
    observation or rejection it would keep, found by `action_id` whatever comes between them."""
    view = laid_out(layout)
    ids = Condenser(max_events=12, keep_first=2).forget(view)
    assert ids == tuple(e.id for e in view[2 : 2 + len(forgotten)])
    assert "".join(layout[int(i[1:]) - 1] for i in ids) == forgotten
