"""The run loop: step the agent until finished, paused, waiting, stuck, or out of iterations/budget."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Collection, Sequence

from convdb.infra import tracing
from convdb.producers._stats import RunStats
from convdb.producers.effect_protocol import EffectProtocol
from convdb.producers.outcome import Outcome
from convdb.producers.status import set_status
from convdb.producers.writer import ConversationWriter, Services
from convdb.projections.view import active_branch
from convdb.schemas import (
    ActionEvent,
    AgentErrorEvent,
    AvroModel,
    Event,
    LLMUsageEvent,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    SystemPromptEvent,
)
from convdb.schemas._types import ExecutionStatus

STUCK_REPEATS = 3
"""Identical consecutive steps that count as stuck."""


class RunLoop:
    """Drives one conversation's agent; the effect protocol runs the actions it proposes."""

    def __init__(
        self,
        writer: ConversationWriter,
        services: Services,
        effects: EffectProtocol,
        stats: RunStats,
        prefix: Sequence[Event] = (),
    ) -> None:
        self.writer = writer
        self.services = services
        self.effects = effects
        self.stats = stats
        self.prefix = tuple(prefix)
        """A fork's source path: what the agent saw before this conversation began."""
        self.pause_requested = threading.Event()
        self.recent_steps: deque[object] = deque(maxlen=STUCK_REPEATS)

    def view(self) -> tuple[Event, ...]:
        """What the agent reads: a fork's source path, then this conversation's active branch."""
        return (*self.prefix, *active_branch(self.writer.state.view))

    def needs_confirmation(self, actions: Sequence[ActionEvent]) -> bool:
        """True when the confirmation policy holds any of these actions."""
        return any(self.services.agent.confirmation.requires(a.security_risk) for a in actions)

    def start(self) -> None:
        """Write the system prompt when the conversation has no event yet."""
        if self.writer.state.view.last_seq == 0:
            agent = self.services.agent
            tools = tuple(t.name for t in agent.tools)
            self.writer.commit(
                lambda: [
                    self.writer.new(
                        SystemPromptEvent,
                        source="agent",
                        content=agent.system_prompt,
                        tools=tools,
                        agent=self.services.agent_name,
                        agent_version=agent.version,
                        **self.effects.delegations.prompt_fields(),
                    )
                ]
            )

    def run(self) -> ExecutionStatus:
        """Step until a stop status, then snapshot; returns the status it stopped in."""
        self.start()
        if self.effects.delegations.waiting():
            return self.writer.state.status  # a child's report continues the run
        set_status(self.writer, "running")
        limit = self.services.runtime.max_iterations
        for _ in range(limit):
            stop = self.stop_reason()
            if stop is not None:
                self._stop(*stop)
                break
            if not self.step():
                break
        else:
            set_status(self.writer, "error", f"max iterations ({limit}) reached")
        self.writer.snapshot()
        return self.writer.state.status

    def stop_reason(self) -> tuple[ExecutionStatus, str] | None:
        """Why the loop must stop before the next step (pause, budget, stuck), or None."""
        budget = self.effects.delegations.budget()
        if self.pause_requested.is_set():
            return "paused", "pause requested"
        # Its own LLM cost and what its children that ended spent (`Delegations.spent`).
        cost = self.effects.delegations.spent() if budget is not None else 0.0
        if budget is not None and cost >= budget:
            return "error", f"budget of {budget} USD spent ({cost:.6f})"
        recent = self.recent_steps
        if len(recent) == STUCK_REPEATS and len(set(map(repr, recent))) == 1:
            return "stuck", f"the same step repeated {STUCK_REPEATS} times"
        return None

    def _stop(self, status: ExecutionStatus, reason: str) -> None:
        if status == "paused":
            self.pause_requested.clear()
            self.writer.commit(lambda: [self.writer.new(PauseEvent, source="user", reason=reason)])
        set_status(self.writer, status, reason)

    def step(self) -> bool:
        """One agent step and its actions; False when the run must stop."""
        started = time.perf_counter()
        attributes = {
            "convdb.conversation_id": self.writer.conversation_id,
            "convdb.tenant_id": self.writer.tenant_id,
        }
        with tracing.span("agent.step", attributes=attributes):
            go_on = self._step(started)
        self.services.metrics.step(time.perf_counter() - started)
        return go_on

    def _step(self, started: float) -> bool:
        tool_before, publish_before = self.stats.tool_ms, self.stats.publish_ms
        events = self.writer.commit(self._propose)
        actions = [e for e in events if isinstance(e, ActionEvent)]
        llm_ms = sum(e.latency_ms for e in events if isinstance(e, LLMUsageEvent))
        confirm = bool(actions) and self.needs_confirmation(actions)
        outcomes = self.effects.run_batch(actions) if actions and not confirm else []
        elapsed = (time.perf_counter() - started) * 1000
        self.stats.count_step(
            elapsed - llm_ms - (self.stats.tool_ms - tool_before), self.stats.publish_ms - publish_before
        )
        self.recent_steps.append(self._signature(events))
        if confirm:
            set_status(self.writer, "waiting_for_confirmation", f"{len(actions)} action(s) need confirmation")
            return False
        if Outcome.HUMAN in outcomes:
            set_status(self.writer, "waiting_for_human", "an operation's outcome is unknown")
            return False
        if Outcome.WAITING in outcomes:
            return False  # children were started: their reports continue the run
        if any(isinstance(e, MessageEvent) for e in events) and not actions:
            set_status(self.writer, "finished", "the agent answered")
            return False
        return True

    def _propose(self) -> list[AvroModel]:
        events: list[AvroModel] = list(self.services.agent.step(self.view(), self.services.llm, self.writer))
        for e in events:
            if isinstance(e, LLMUsageEvent):
                self.stats.add_usage(e.prompt_tokens, e.completion_tokens, e.cost, e.latency_ms)
        actions = [e for e in events if isinstance(e, ActionEvent)]
        if actions and not self.needs_confirmation(actions):
            # ActionEvent and EffectProposed are durable together, before any provider call.
            events += self.effects.proposals(actions)
        return events

    def _signature(self, events: Sequence[AvroModel]) -> object:
        """What a step did and saw; a message step never repeats (a fresh object)."""
        actions = {e.id: (e.tool_name, e.arguments) for e in events if isinstance(e, ActionEvent)}
        errors = tuple(e.error for e in events if isinstance(e, AgentErrorEvent))
        if not actions and not errors:
            return object()
        seen = sorted(e.content for e in observations_of(self.writer.state.view.log, actions))
        return (tuple(sorted(actions.values())), errors, tuple(seen))


def observations_of(log: Sequence[Event], action_ids: Collection[str]) -> list[ObservationEvent]:
    """The observations in `log` of these actions (by `action_id`), newest first.

    An observation follows its action, whatever else the log holds between them, so the log is
    read backwards only down to the earliest of the actions: the step's tail, not the conversation.
    """
    found: list[ObservationEvent] = []
    pending = set(action_ids)
    for event in reversed(log):
        if not pending:
            break
        if isinstance(event, ObservationEvent) and event.action_id in action_ids:
            found.append(event)
        pending.discard(event.id)
    return found
