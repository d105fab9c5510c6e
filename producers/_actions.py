"""The effect protocol for one action (DESIGN §6), shared by live runs and `resume`.

Every non-read-only call is bracketed by durable ledger writes: EffectProposed (with the
ActionEvent), EffectStarted, the provider call with operation_id as idempotency key, then
ObservationEvent + EffectConfirmed/EffectFailed. An ambiguous call is settled by `lookup`,
a retry the effect class allows, or EffectUnknown for a human.
"""

from __future__ import annotations

import enum
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from producers import _records as rec
from producers.errors import EffectError, OutcomeUnknownError, ToolArgumentError
from producers.tools.base import Tool, ToolResult, ask_provider
from projections import operation
from projections.effects import backfill_observation
from projections.settlement import settle as decide_settlement
from schemas import ActionEvent, AvroModel, LedgerRecord
from schemas._types import LedgerOrigin

if TYPE_CHECKING:
    from producers.conversation import Conversation

logger = logging.getLogger(__name__)

class Outcome(enum.Enum):
    """How an action ended for now."""

    DONE = "done"
    """Observed (success or definite failure)."""
    HUMAN = "human"
    """Outcome unknown: EffectUnknown is on the ledger, a human decides."""


def run_batch(conv: Conversation, actions: list[ActionEvent]) -> list[Outcome]:
    """Run the actions of one LLM response, `runtime.action_concurrency` at a time."""
    limit = max(1, conv.runtime.action_concurrency)
    if limit == 1 or len(actions) == 1:
        return [run_action(conv, a) for a in actions]
    with ThreadPoolExecutor(max_workers=min(limit, len(actions)), thread_name_prefix="action") as pool:
        return list(pool.map(lambda a: run_action(conv, a), actions))


def _prepare(conv: Conversation, action: ActionEvent) -> tuple[Tool, dict] | ToolResult:
    try:
        tool = conv.agent.tool(action.tool_name)
        return tool, tool.parse(conv.secrets.reveal(action.arguments))
    except ToolArgumentError as exc:
        return ToolResult(str(exc), is_error=True)


def run_action(conv: Conversation, action: ActionEvent) -> Outcome:
    """Execute one action whose proposal (if it needs one) is durable."""
    prepared = _prepare(conv, action)
    if isinstance(prepared, ToolResult):
        return _finish(conv, action, prepared)
    tool, args = prepared
    if tool.effect_class == "read_only":
        return _finish(conv, action, _call(conv, tool, rec.operation(conv, action, args, 1)), ledger=False)
    conv.crash.hit("after_effect_proposed", tool.name)
    return _attempt(conv, action, tool, args)


def _call(conv: Conversation, tool: Tool, op: rec.Operation) -> ToolResult:
    started = time.perf_counter()
    try:
        return tool.execute(op)
    except OutcomeUnknownError:
        raise
    except EffectError as exc:
        return ToolResult(str(exc), is_error=True)
    finally:
        conv.stats.add_tool_time(time.perf_counter() - started)


def _attempt(conv: Conversation, action: ActionEvent, tool: Tool, args: dict) -> Outcome:
    state = conv.ledger.get(action.operation_id)
    attempt = (state.attempt if state else 0) + 1
    conv.commit(lambda: [rec.started(conv, action, attempt)])
    conv.crash.hit("after_effect_started", tool.name)
    try:
        result = _call(conv, tool, rec.operation(conv, action, args, attempt))
    except OutcomeUnknownError as exc:
        conv.crash.hit("after_provider_call", tool.name)
        return settle(conv, action, reason=str(exc))
    conv.crash.hit("after_provider_call", tool.name)
    return _finish(conv, action, result)


def _finish(
    conv: Conversation,
    action: ActionEvent,
    result: ToolResult,
    *,
    ledger: bool = True,
    backfilled: bool = False,
    origin: LedgerOrigin = "runner",
) -> Outcome:
    """Publish the observation and (unless already recorded) the ledger outcome, together."""

    def build() -> list:
        records: list = [rec.observation(conv, action, result, backfilled=backfilled)]
        state = conv.ledger.get(action.operation_id)
        if ledger and state is not None and state.is_open:
            if result.is_error:
                records.append(rec.failed(conv, action, result.content, origin=origin))
            else:
                records.append(rec.confirmed(conv, action, result, origin=origin))
        return records

    conv.commit(build)
    conv.crash.hit("after_observation", action.tool_name)
    return Outcome.DONE


def settle(conv: Conversation, action: ActionEvent, reason: str) -> Outcome:
    """Decide an operation that was started but has no outcome: lookup, retry, or a human."""
    prepared = _prepare(conv, action)
    if isinstance(prepared, ToolResult):
        return mark_unknown(conv, action, reason, f"cannot prepare a lookup: {prepared.content}")
    tool, args = prepared
    state = conv.ledger[action.operation_id]
    lookup = None
    if tool.supports_lookup:
        lookup = ask_provider(tool, rec.operation(conv, action, args, state.attempt))
    verdict = decide_settlement(state, lookup)
    if verdict.action == "confirm":
        found = ToolResult(verdict.result, verdict.provider_receipt)
        return backfill(conv, action, rec.confirmed(conv, action, found, origin="lookup"))
    if verdict.action == "retry":
        logger.info("retrying %s (attempt %d): %s", action.operation_id, state.attempt + 1, verdict.detail)
        return _attempt(conv, action, tool, args)
    return mark_unknown(conv, action, reason, verdict.detail)


def mark_unknown(conv: Conversation, action: ActionEvent, reason: str, evidence: str) -> Outcome:
    """Record EffectUnknown once (never again if the ledger already says unknown)."""
    state = conv.ledger.get(action.operation_id)
    if state is not None and state.status != "unknown":
        conv.commit(lambda: [rec.unknown(conv, action, reason, evidence)])
    logger.warning("operation %s outcome unknown: %s (%s)", action.operation_id, reason, evidence)
    return Outcome.HUMAN


def backfill(conv: Conversation, action: ActionEvent, *outcome: LedgerRecord) -> Outcome:
    """Publish the missing observation of an operation whose outcome is known (or is recorded by
    `outcome` in the same write): `projections.effects.backfill_observation` of its settled state."""
    state = operation.fold(conv.ledger[action.operation_id], action)

    def build() -> list[AvroModel]:
        settled = state
        for record in outcome:
            settled = operation.fold(settled, record)
        place = conv.place()
        observation = backfill_observation(
            settled, event_id=place.id, seq=place.seq, parent_id=place.parent_id, timestamp=place.timestamp
        )
        return [observation, *outcome]

    conv.commit(build)
    conv.crash.hit("after_observation", action.tool_name)
    return Outcome.DONE


def backfill_from_ledger(conv: Conversation, action: ActionEvent) -> Outcome:
    """Backfill from the ledger's outcome, or from a receipt (its outcome recorded with it)."""
    state = conv.ledger[action.operation_id]
    receipt = state.receipt
    if state.status is not None and state.status.is_terminal:
        return backfill(conv, action)
    if receipt is not None:
        result = ToolResult(
            receipt.result or json.dumps({"receipt": receipt.provider_receipt}), receipt.provider_receipt
        )
        # A receipt proves the call was made, so its proposal was durable: a ledger that lacks it
        # was read from after it, and the proposal is recorded again (a no-op for every reader).
        proposal = [rec.proposed(conv, action)] if state.status is None else []
        if receipt.status == "failed":
            outcome: LedgerRecord = rec.failed(conv, action, result.content, origin="receipt")
        else:
            outcome = rec.confirmed(conv, action, result, origin="receipt")
        return backfill(conv, action, *proposal, outcome)
    raise ValueError(f"operation {action.operation_id} has no known outcome to backfill")
