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
from producers.effects import retry_allowed
from producers.errors import EffectError, OutcomeUnknownError, ToolArgumentError
from producers.tools.base import Tool, ToolResult
from schemas import ActionEvent

if TYPE_CHECKING:
    from producers.conversation import Conversation

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
"""Provider calls per operation before an ambiguous outcome goes to a human."""


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
    attempt = (state.attempts if state else 0) + 1
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
    origin: str = "runner",
) -> Outcome:
    """Publish the observation and (unless already recorded) the ledger outcome, together."""

    def build() -> list:
        records: list = [rec.observation(conv, action, result, backfilled=backfilled)]
        state = conv.ledger.get(action.operation_id)
        if ledger and state is not None and state.open:
            if result.is_error:
                records.append(rec.failed(conv, action, result.content, origin=origin))  # type: ignore[arg-type]
            else:
                records.append(rec.confirmed(conv, action, result, origin=origin))  # type: ignore[arg-type]
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
    state = conv.ledger.get(action.operation_id)
    attempts = state.attempts if state else 0
    op = rec.operation(conv, action, args, attempts)
    provably_not_done = False
    if tool.supports_lookup:
        try:
            found = tool.lookup(op)
        except (OutcomeUnknownError, EffectError) as exc:
            return mark_unknown(conv, action, reason, f"lookup failed: {exc}")
        if found is not None:
            return _finish(conv, action, found, backfilled=True, origin="lookup")
        provably_not_done = True
    if not retry_allowed(tool.effect_class, provably_not_done):
        evidence = "lookup: not found" if tool.supports_lookup else f"{tool.name} has no lookup"
        return mark_unknown(conv, action, reason, f"{evidence}; {attempts} attempt(s) started")
    if attempts >= MAX_ATTEMPTS:
        return mark_unknown(conv, action, reason, f"gave up after {attempts} attempts")
    logger.info("retrying %s (attempt %d) with the same key", action.operation_id, attempts + 1)
    return _attempt(conv, action, tool, args)


def mark_unknown(conv: Conversation, action: ActionEvent, reason: str, evidence: str) -> Outcome:
    """Record EffectUnknown once (never again if the ledger already says unknown)."""
    state = conv.ledger.get(action.operation_id)
    if state is None or state.status != "unknown":
        conv.commit(lambda: [rec.unknown(conv, action, reason, evidence)])
    logger.warning("operation %s outcome unknown: %s (%s)", action.operation_id, reason, evidence)
    return Outcome.HUMAN


def backfill_from_ledger(conv: Conversation, action: ActionEvent) -> Outcome:
    """Publish the missing observation of an operation whose outcome is known."""
    state = conv.ledger[action.operation_id]
    receipt = state.receipt
    if state.status == "confirmed":
        result = ToolResult(state.result or f"confirmed ({state.provider_receipt})", state.provider_receipt)
        return _finish(conv, action, result, backfilled=True)
    if state.status == "failed":
        return _finish(conv, action, ToolResult(state.error, is_error=True), backfilled=True)
    if receipt is not None:
        result = ToolResult(
            receipt.result or json.dumps({"receipt": receipt.provider_receipt}),
            receipt.provider_receipt,
            is_error=receipt.status == "failed",
        )
        return _finish(conv, action, result, backfilled=True, origin="receipt")
    raise ValueError(f"operation {action.operation_id} has no known outcome to backfill")
