"""The run loop of a Conversation, and forking (kept out of `conversation.py` for size)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from producers import _actions
from producers import _records as rec
from producers.conversation_types import STUCK_REPEATS
from projections.view import path_to_root
from schemas import (
    ActionEvent,
    AgentErrorEvent,
    AvroModel,
    ForkEvent,
    LLMUsageEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
)
from schemas._types import ExecutionStatus

if TYPE_CHECKING:
    from producers.conversation import Conversation


def run(conv: Conversation) -> ExecutionStatus:
    """Step until finished, paused, waiting, stuck, or out of iterations/budget; then snapshot."""
    conv.start()
    conv.set_status("running")
    for _ in range(conv.runtime.max_iterations):
        stop = stop_reason(conv)
        if stop is not None:
            _stop(conv, *stop)
            break
        if not step(conv):
            break
    else:
        conv.set_status("error", f"max iterations ({conv.runtime.max_iterations}) reached")
    conv.snapshot()
    return conv.status


def stop_reason(conv: Conversation) -> tuple[ExecutionStatus, str] | None:
    """Why the loop must stop before the next step (pause, budget, stuck), or None."""
    budget = conv.runtime.max_budget_usd
    if conv.pause_requested.is_set():
        return "paused", "pause requested"
    if budget is not None and conv.total_cost() >= budget:
        return "error", f"budget of {budget} USD spent ({conv.total_cost():.6f})"
    recent = conv.recent_steps
    if len(recent) == STUCK_REPEATS and len(set(map(repr, recent))) == 1:
        return "stuck", f"the same step repeated {STUCK_REPEATS} times"
    return None


def _stop(conv: Conversation, status: ExecutionStatus, reason: str) -> None:
    if status == "paused":
        conv.pause_requested.clear()
        conv.commit(lambda: [conv.new(PauseEvent, source="user", reason=reason)])
    conv.set_status(status, reason)


def step(conv: Conversation) -> bool:
    """One agent step and its actions; False when the run must stop."""
    started = time.perf_counter()
    tool_before, publish_before = conv.stats.tool_ms, conv.stats.publish_ms
    events = conv.commit(lambda: _propose(conv))
    actions = [e for e in events if isinstance(e, ActionEvent)]
    llm_ms = sum(e.latency_ms for e in events if isinstance(e, LLMUsageEvent))
    confirm = bool(actions) and conv.needs_confirmation(actions)
    outcomes = _actions.run_batch(conv, actions) if actions and not confirm else []
    elapsed = (time.perf_counter() - started) * 1000
    conv.stats.count_step(
        elapsed - llm_ms - (conv.stats.tool_ms - tool_before), conv.stats.publish_ms - publish_before
    )
    conv.recent_steps.append(_signature(conv, events))
    if confirm:
        conv.set_status("waiting_for_confirmation", f"{len(actions)} action(s) need confirmation")
        return False
    if _actions.Outcome.HUMAN in outcomes:
        conv.set_status("waiting_for_human", "an operation's outcome is unknown")
        return False
    if any(isinstance(e, MessageEvent) for e in events) and not actions:
        conv.set_status("finished", "the agent answered")
        return False
    return True


def _propose(conv: Conversation) -> list[AvroModel]:
    events: list[AvroModel] = list(conv.agent.step(conv.view(), conv.llm, conv))
    for e in events:
        if isinstance(e, LLMUsageEvent):
            conv.stats.add_usage(e.prompt_tokens, e.completion_tokens, e.cost, e.latency_ms)
    actions = [e for e in events if isinstance(e, ActionEvent)]
    if actions and not conv.needs_confirmation(actions):
        # ActionEvent and EffectProposed are durable together, before any provider call.
        events += [rec.proposed(conv, a) for a in actions if a.effect_class != "read_only"]
    return events


def _signature(conv: Conversation, events: Sequence[AvroModel]) -> object:
    """What a step did and saw; a message step never repeats (a fresh object)."""
    actions = {e.id: (e.tool_name, e.arguments) for e in events if isinstance(e, ActionEvent)}
    errors = tuple(e.error for e in events if isinstance(e, AgentErrorEvent))
    if not actions and not errors:
        return object()
    recent = conv.state.log[-(2 * len(actions) + 4) :]
    seen = sorted(e.content for e in recent if isinstance(e, ObservationEvent) and e.action_id in actions)
    return (tuple(sorted(actions.values())), errors, tuple(seen))


def fork(
    conv: Conversation, conversation_id: str, *, at_event_id: str | None, snapshot_ref: str | None
) -> Conversation:
    """A new conversation continuing after an event of `conv`; it records a ForkEvent saying
    the workspace is shared unless `snapshot_ref` names a workspace snapshot."""
    source_event = at_event_id or conv.state.active_leaf
    if source_event is None:
        raise ValueError(f"conversation {conv.conversation_id} has no event to fork from")
    child = type(conv)(
        conversation_id, conv.tenant_id, conv.agent, conv.sink, conv.llm,
        runtime=conv.runtime, secrets=conv.secrets, crash=conv.crash,
        prefix=(*conv.prefix, *path_to_root(conv.state, source_event)),
    )
    child.commit(
        lambda: [
            child.new(
                ForkEvent, source="user", parent_id=source_event,
                source_conversation_id=conv.conversation_id, source_event_id=source_event,
                workspace_shared=snapshot_ref is None, snapshot_ref=snapshot_ref,
            )
        ]
    )
    return child
