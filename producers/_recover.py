"""`Conversation.resume`: finish half-done actions per action, never per batch (DESIGN §6)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from producers import _actions
from producers import _records as rec
from producers._actions import Outcome
from projections.settlement import Step, next_step
from schemas import ActionEvent, ObservationEvent
from schemas._types import ExecutionStatus

if TYPE_CHECKING:
    from producers.conversation import Conversation

logger = logging.getLogger(__name__)


def resume(conv: Conversation) -> ExecutionStatus:
    """Recover every unobserved action, then continue the run it interrupted."""
    heal_ledger(conv)
    pending = conv.unobserved_actions()
    awaiting = [a for a in pending if a.operation_id not in conv.ledger and a.effect_class != "read_only"]
    if awaiting and conv.status == "waiting_for_confirmation":
        return conv.status  # the user has not decided yet: nothing may run
    outcomes = [recover_action(conv, action) for action in pending]
    if Outcome.HUMAN in outcomes:
        if conv.status != "waiting_for_human":
            if conv.status != "running":
                conv.set_status("running", "resumed")
            conv.set_status("waiting_for_human", "an operation's outcome is unknown")
        conv.snapshot()
        return conv.status
    if pending or conv.status in ("running", "waiting_for_human"):
        return conv.run()
    return conv.status


def recover_action(conv: Conversation, action: ActionEvent) -> Outcome:
    """The one recovery step this action needs, from the ledger (and receipts)."""
    if action.effect_class == "read_only":
        return _actions.run_action(conv, action)  # reading again changes nothing
    state = conv.ledger.get(action.operation_id)
    step = next_step(state)
    logger.info(
        "resume %s: %s (ledger %s)", action.operation_id, step.value, state.status if state else "none"
    )
    match step:
        case Step.EXECUTE:
            if state is None:
                conv.commit(lambda: [rec.proposed(conv, action)])
            return _actions.run_action(conv, action)
        case Step.BACKFILL:
            return _actions.backfill_from_ledger(conv, action)
        case Step.SETTLE:
            return _actions.settle(conv, action, reason="the runner stopped during the provider call")
        case Step.WAIT_HUMAN:
            return Outcome.HUMAN
    raise ValueError(f"unhandled recovery step {step}")


def heal_ledger(conv: Conversation) -> None:
    """Record the outcome of observed actions whose ledger entry is still open (a crash between
    the observation and its ledger record, when they were not written atomically)."""
    observed = {e.action_id: e for e in conv.state.log if isinstance(e, ObservationEvent)}
    records = []
    for action in (e for e in conv.state.log if isinstance(e, ActionEvent)):
        state = conv.ledger.get(action.operation_id)
        obs = observed.get(action.id)
        if state is None or not state.is_open or obs is None or state.status == "unknown":
            continue
        result = _actions.ToolResult(obs.content, obs.provider_receipt, obs.is_error)
        records.append(
            rec.failed(conv, action, obs.content) if obs.is_error else rec.confirmed(conv, action, result)
        )
    if records:
        conv.commit(lambda: records)
