"""The effect protocol for one action (DESIGN §6), shared by live runs and recovery.

Every non-read-only call is bracketed by durable ledger writes: EffectProposed (with the
ActionEvent), EffectStarted, the provider call with operation_id as idempotency key, then
ObservationEvent + EffectConfirmed/EffectFailed. An ambiguous call is settled with the rules of
`convdb.projections.settlement`: the provider's lookup, a retry the effect class allows, or
EffectUnknown for a human.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from convdb.infra import tracing
from convdb.producers import records as rec
from convdb.producers._stats import RunStats
from convdb.producers.delegation import NEVER_DUE, Delegations
from convdb.producers.errors import EffectError, OutcomeUnknownError, ToolArgumentError
from convdb.producers.outcome import Outcome
from convdb.producers.tools.base import Operation, Tool, ToolResult, ask_provider
from convdb.producers.tools.delegation import DelegationTool
from convdb.producers.writer import ConversationWriter, Services
from convdb.projections import operation
from convdb.projections.effects import backfill_observation
from convdb.projections.operation import OperationState
from convdb.projections.settlement import settle
from convdb.schemas import ActionEvent, AvroModel, EffectProposed, LedgerRecord
from convdb.schemas._types import LedgerOrigin

logger = logging.getLogger(__name__)


class EffectProtocol:
    """Runs actions through the protocol, settles ambiguous calls, backfills known outcomes."""

    def __init__(self, writer: ConversationWriter, services: Services, stats: RunStats) -> None:
        self.writer = writer
        self.services = services
        self.stats = stats
        self.delegations = Delegations(writer, services, self)

    def _state(self, action: ActionEvent) -> OperationState | None:
        return self.writer.state.ledger.get(action.operation_id)

    def proposals(self, actions: list[ActionEvent]) -> list[EffectProposed]:
        """EffectProposed for every action that has an effect (durable before any provider call)."""
        after = self.services.runtime.reconcile_after_s
        never = NEVER_DUE.total_seconds()
        return [
            rec.proposed(self.writer, a, never if self.delegations.tool_of(a) else after)
            for a in actions
            if a.effect_class != "read_only"
        ]

    def run_batch(self, actions: list[ActionEvent]) -> list[Outcome]:
        """Run the actions of one LLM response, `runtime.action_concurrency` at a time."""
        limit = max(1, self.services.runtime.action_concurrency)
        if limit == 1 or len(actions) == 1:
            return [self.run_action(a) for a in actions]
        with ThreadPoolExecutor(max_workers=min(limit, len(actions)), thread_name_prefix="action") as pool:
            # Each action runs in the caller's context: its tool span is a child of the step's.
            runs = [pool.submit(contextvars.copy_context().run, self.run_action, a) for a in actions]
            return [run.result() for run in runs]

    def _prepare(self, action: ActionEvent) -> tuple[Tool, dict[str, Any]] | ToolResult:
        try:
            tool = self.services.agent.tool(action.tool_name)
            return tool, tool.parse(self.services.secrets.reveal(action.arguments))
        except ToolArgumentError as exc:
            return ToolResult(str(exc), is_error=True)

    def run_action(self, action: ActionEvent) -> Outcome:
        """Execute one action whose proposal (if it needs one) is durable."""
        prepared = self._prepare(action)
        if isinstance(prepared, ToolResult):
            return self._finish(action, prepared)
        tool, args = prepared
        if tool.effect_class == "read_only":
            try:
                result = self._call(tool, rec.operation(self.writer, action, args, 1))
            except OutcomeUnknownError as exc:
                # Nothing was changed either way: a read that did not answer is a failed read.
                result = ToolResult(str(exc), is_error=True)
            return self._finish(action, result, ledger=False)
        self.services.crash.hit("after_effect_proposed", tool.name)
        if isinstance(tool, DelegationTool):
            return self.delegations.start(action, tool, args)
        return self._attempt(action, tool, args)

    def _call(self, tool: Tool, op: Operation) -> ToolResult:
        started = time.perf_counter()
        attributes = {"convdb.operation_id": op.operation_id, "convdb.effect_class": tool.effect_class}
        try:
            with tracing.span(f"tool.call {tool.name}", attributes=attributes):
                return tool.execute(op)
        except OutcomeUnknownError:
            raise
        except EffectError as exc:
            return ToolResult(str(exc), is_error=True)
        finally:
            self.stats.add_tool_time(time.perf_counter() - started)

    def _attempt(self, action: ActionEvent, tool: Tool, args: dict[str, Any]) -> Outcome:
        state = self._state(action)
        attempt = (state.attempt if state else 0) + 1
        self.writer.commit(lambda: [rec.started(self.writer, action, attempt)])
        self.services.crash.hit("after_effect_started", tool.name)
        try:
            result = self._call(tool, rec.operation(self.writer, action, args, attempt))
        except OutcomeUnknownError as exc:
            self.services.crash.hit("after_provider_call", tool.name)
            return self.settle(action, reason=str(exc))
        self.services.crash.hit("after_provider_call", tool.name)
        return self._finish(action, result)

    def finish(self, action: ActionEvent, result: ToolResult) -> Outcome:
        """Publish an action's observation and its ledger outcome, together (delegation's too)."""
        return self._finish(action, result)

    def _finish(
        self, action: ActionEvent, result: ToolResult, *, ledger: bool = True, origin: LedgerOrigin = "runner"
    ) -> Outcome:
        """Publish the observation and (unless already recorded) the ledger outcome, together."""

        def build() -> list[AvroModel]:
            records: list[AvroModel] = [rec.observation(self.writer, action, result)]
            state = self._state(action)
            if ledger and state is not None and state.is_open:
                records.append(rec.outcome(self.writer, action, result, origin))
            return records

        self.writer.commit(build)
        self.services.crash.hit("after_observation", action.tool_name)
        return Outcome.DONE

    def settle(self, action: ActionEvent, reason: str) -> Outcome:
        """Decide an operation that was started but has no outcome: lookup, retry, or a human."""
        prepared = self._prepare(action)
        if isinstance(prepared, ToolResult):
            return self.mark_unknown(action, reason, f"cannot prepare a lookup: {prepared.content}")
        tool, args = prepared
        state = self._state(action)
        if state is None:
            raise ValueError(f"operation {action.operation_id} was never proposed: nothing to settle")
        lookup = None
        if tool.supports_lookup:
            lookup = ask_provider(tool, rec.operation(self.writer, action, args, state.attempt))
        verdict = settle(state, lookup)
        if verdict.action == "confirm":
            found = ToolResult(verdict.result, verdict.provider_receipt)
            return self.backfill(action, rec.learned(self.writer, action, found, "lookup"))
        if verdict.action == "retry":
            logger.info(
                "retrying %s (attempt %d): %s", action.operation_id, state.attempt + 1, verdict.detail
            )
            return self._attempt(action, tool, args)
        return self.mark_unknown(action, reason, verdict.detail)

    def mark_unknown(self, action: ActionEvent, reason: str, evidence: str) -> Outcome:
        """Record EffectUnknown once (never again if the ledger already says unknown)."""
        state = self._state(action)
        if state is not None and state.status != "unknown":
            self.writer.commit(lambda: [rec.unknown(self.writer, action, reason, evidence)])
        logger.warning("operation %s outcome unknown: %s (%s)", action.operation_id, reason, evidence)
        return Outcome.HUMAN

    def backfill(self, action: ActionEvent, *outcome: LedgerRecord) -> Outcome:
        """Publish the missing observation of an operation whose outcome is known (or is recorded by
        `outcome` in the same write): `projections.effects.backfill_observation` of its settled state."""
        state = self._state(action)
        if state is None:
            raise ValueError(f"operation {action.operation_id} has no ledger to backfill from")
        state = operation.fold(state, action)

        def build() -> list[AvroModel]:
            settled = state
            for record in outcome:
                settled = operation.fold(settled, record)
            place = self.writer.place()
            observation = backfill_observation(
                settled,
                event_id=place.id,
                seq=place.seq,
                parent_id=place.parent_id,
                timestamp=place.timestamp,
            )
            return [observation, *outcome]

        self.writer.commit(build)
        self.services.crash.hit("after_observation", action.tool_name)
        return Outcome.DONE

    def backfill_from_ledger(self, action: ActionEvent) -> Outcome:
        """Backfill from the ledger's outcome, or from a receipt (its outcome recorded with it)."""
        state = self._state(action)
        if state is not None and state.status is not None and state.status.is_terminal:
            return self.backfill(action)
        receipt = state.receipt if state is not None else None
        if state is None or receipt is None:
            raise ValueError(f"operation {action.operation_id} has no known outcome to backfill")
        content = receipt.result or json.dumps({"receipt": receipt.provider_receipt})
        result = ToolResult(content, receipt.provider_receipt, is_error=receipt.status == "failed")
        # A receipt proves the call was made, so its proposal was durable: a ledger that lacks it
        # was read from after it, and the proposal is recorded again (a no-op for every reader).
        proposal = self.proposals([action]) if state.status is None else []
        return self.backfill(action, *proposal, rec.learned(self.writer, action, result, "receipt"))
