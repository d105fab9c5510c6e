"""Recovery: finish what a crash left half-done, per action, never per batch (DESIGN §6).

For each action without observation, `convdb.projections.settlement.next_step` of its operation's state
says what to do: execute (never started), backfill (outcome known), settle (started, no outcome)
or wait for a human (unknown). An irreversible action is never run again blindly.
"""

from __future__ import annotations

import logging

from convdb.producers import records as rec
from convdb.producers.effect_protocol import EffectProtocol
from convdb.producers.outcome import Outcome
from convdb.producers.state import unobserved_actions
from convdb.producers.status import set_status
from convdb.producers.tools.base import ToolResult
from convdb.producers.writer import ConversationWriter
from convdb.projections.settlement import Step, next_step
from convdb.schemas import ActionEvent, AvroModel, ObservationEvent
from convdb.schemas._types import ExecutionStatus

logger = logging.getLogger(__name__)


class Recovery:
    """Brings a conversation's half-done actions to an outcome, or to a human."""

    def __init__(self, writer: ConversationWriter, effects: EffectProtocol) -> None:
        self.writer = writer
        self.effects = effects

    def resume(self) -> ExecutionStatus | None:
        """Recover every unobserved action; the status to stop in, or None when the run continues."""
        self.heal_ledger()
        state = self.writer.state
        pending = unobserved_actions(state.view)
        awaiting = [
            a for a in pending if a.operation_id not in state.ledger and a.effect_class != "read_only"
        ]
        if awaiting and state.status == "waiting_for_confirmation":
            return state.status  # the user has not decided yet: nothing may run
        outcomes = [self.recover_action(action) for action in pending]
        status = self.writer.state.status
        if Outcome.WAITING in outcomes and Outcome.HUMAN not in outcomes:
            self.writer.snapshot()
            return status  # children still work: their reports continue the run
        if Outcome.HUMAN in outcomes:
            if status != "waiting_for_human":
                if status != "running":
                    set_status(self.writer, "running", "resumed")
                set_status(self.writer, "waiting_for_human", "an operation's outcome is unknown")
            self.writer.snapshot()
            return self.writer.state.status
        if pending or status in ("running", "waiting_for_human"):
            return None
        return status

    def recover_action(self, action: ActionEvent) -> Outcome:
        """The one recovery step this action needs, from its operation's state."""
        if action.effect_class == "read_only":
            return self.effects.run_action(action)  # reading again changes nothing
        if self.effects.delegations.tool_of(action) is not None:
            return self.effects.delegations.recover(action)
        state = self.writer.state.ledger.get(action.operation_id)
        step = next_step(state)
        logger.info(
            "resume %s: %s (ledger %s)", action.operation_id, step.value, state.status if state else "none"
        )
        match step:
            case Step.EXECUTE:
                if state is None or state.status is None:
                    self.writer.commit(lambda: self.effects.proposals([action]))
                return self.effects.run_action(action)
            case Step.BACKFILL:
                return self.effects.backfill_from_ledger(action)
            case Step.SETTLE:
                return self.effects.settle(action, reason="the runner stopped during the provider call")
            case Step.WAIT_HUMAN:
                return Outcome.HUMAN
        raise ValueError(f"unhandled recovery step {step}")

    def heal_ledger(self) -> None:
        """Record the outcome of observed actions whose operation is still open (a crash between the
        observation and its ledger record, when they were not written atomically)."""
        state = self.writer.state
        observed = {e.action_id: e for e in state.view.log if isinstance(e, ObservationEvent)}
        records: list[AvroModel] = []
        for action in (e for e in state.view.log if isinstance(e, ActionEvent)):
            op = state.ledger.get(action.operation_id)
            obs = observed.get(action.id)
            if op is None or not op.is_open or obs is None or op.status == "unknown":
                continue
            result = ToolResult(obs.content, obs.provider_receipt, obs.is_error)
            records.append(rec.outcome(self.writer, action, result))
        if records:
            self.writer.commit(lambda: records)
