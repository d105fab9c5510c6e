"""The stateless Agent: frozen configuration whose `step` reads the view and proposes events."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny

from convdb.infra import tracing
from convdb.producers.errors import ToolArgumentError
from convdb.producers.llm import LLMClient, LLMReply, ToolCall
from convdb.producers.scripted import SCRIPTED_MODEL
from convdb.producers.tools.base import Tool, canonical_json, find_tool, intent_hash
from convdb.schemas import (
    ActionEvent,
    AgentErrorEvent,
    CondensationEvent,
    Event,
    EventEnvelope,
    LLMUsageEvent,
    MessageEvent,
    ObservationEvent,
    UserRejectEvent,
)
from convdb.schemas._types import EffectClass, SecurityRisk

E = TypeVar("E", bound=EventEnvelope)

RISK_ORDER: tuple[SecurityRisk, ...] = ("unknown", "low", "medium", "high")

DEFAULT_PROMPT = "You are a careful agent. Use the tools to do the task, then answer briefly."


class EventFactory(Protocol):
    """Fills in an event's envelope (id, seq, parent, time) for the conversation."""

    @property
    def conversation_id(self) -> str:
        """The conversation the events are for."""
        ...

    def new_id(self) -> str:
        """A fresh event id."""
        ...

    def new(self, cls: type[E], *, source: str, **fields: Any) -> E:
        """An event of `cls` placed after the current active leaf."""
        ...


class Frozen(BaseModel):
    """Base of the agent's configuration parts."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class SecurityAnalyzer(Frozen):
    """Rates an action's risk from its tool's effect class."""

    risk_by_class: dict[EffectClass, SecurityRisk] = Field(
        # Typed explicitly: inside Field's overloaded `default_factory` a bare literal is dict[str, str].
        default_factory=lambda: dict[EffectClass, SecurityRisk](
            {"read_only": "low", "idempotent": "low", "keyed": "medium", "irreversible": "high"}
        )
    )

    def assess(self, tool: Tool) -> SecurityRisk:
        """The risk of calling `tool`."""
        return self.risk_by_class.get(tool.effect_class, "unknown")


class ConfirmationPolicy(Frozen):
    """When an action needs the user's confirmation before it runs."""

    mode: Literal["never", "always", "risky"] = "never"
    threshold: SecurityRisk = "high"

    def requires(self, risk: SecurityRisk) -> bool:
        """True when an action of this risk must wait for confirmation."""
        if self.mode == "never":
            return False
        if self.mode == "always" or risk == "unknown":
            return True
        return RISK_ORDER.index(risk) >= RISK_ORDER.index(self.threshold)


class Condenser(Frozen):
    """Forgets the middle of a long view, keeping the first events and a summary."""

    max_events: int | None = None
    keep_first: int = 2

    def forget(self, view: Sequence[Event]) -> tuple[str, ...]:
        """Ids to forget now (empty when the view is short enough)."""
        if self.max_events is None or len(view) <= self.max_events:
            return ()
        # Forget half the overflowing middle at once so condensations stay rare.
        keep_tail = self.max_events // 2
        cut = _unsplit_cut(view, self.keep_first, len(view) - keep_tail)
        return tuple(e.id for e in view[self.keep_first : cut])


def _unsplit_cut(view: Sequence[Event], start: int, cut: int) -> int:
    """`cut`, moved back so that forgetting `view[start:cut]` splits no action from its answer.

    The answer (an `ObservationEvent`, or the user's `UserRejectEvent`) is found by `action_id`,
    wherever it is: other events may come between an action and its answer. An action forgotten
    without an answer in the view leaves nothing behind.
    """
    answered_at = {
        e.action_id: i
        for i, e in enumerate(view[start:], start)
        if isinstance(e, ObservationEvent | UserRejectEvent)
    }
    # Backwards, so that moving the cut before one action also checks the actions before it.
    for i in range(cut - 1, start - 1, -1):
        event = view[i]
        if isinstance(event, ActionEvent) and answered_at.get(event.id, -1) >= cut:
            cut = i
    return cut


class Agent(Frozen):
    """Model, tools, prompt and policies; holds no conversation state.

    Frozen: build one per configuration (`Agent(model=..., system_prompt=..., tools=(...))`) and
    hand it to the runtime, or register a factory in the `convdb.agents` entry-point group.
    `version` identifies the configuration.
    """

    model: str = SCRIPTED_MODEL
    system_prompt: str = DEFAULT_PROMPT
    tools: tuple[SerializeAsAny[Tool], ...] = ()
    condenser: Condenser = Field(default_factory=Condenser)
    confirmation: ConfirmationPolicy = Field(default_factory=ConfirmationPolicy)
    security: SecurityAnalyzer = Field(default_factory=SecurityAnalyzer)

    @property
    def version(self) -> str:
        """A stable digest of this configuration (16 hex digits).

        Equal for equal configurations in any process: the model, the prompt, the policies and,
        for each tool, its name, class, effect class, lookup, argument schema and settings. A
        conversation records the version it started under (`SystemPromptEvent.agent_version`).
        """
        tools = [
            {
                "class": f"{type(t).__module__}.{type(t).__qualname__}",
                "spec": t.spec(),
                "effect_class": t.effect_class,
                "lookup": t.supports_lookup,
                "config": t.model_dump(mode="json"),
            }
            for t in self.tools
        ]
        config = self.model_dump(mode="json", exclude={"tools"})
        text = canonical_json({"agent": config, "tools": tools})
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def tool(self, name: str) -> Tool:
        """The tool called `name`; raises `ToolArgumentError` when there is none."""
        return find_tool(self.tools, name)

    def step(self, view: Sequence[Event], llm: LLMClient, new: EventFactory) -> list[Event]:
        """Propose the next events: a condensation, or the LLM's usage plus message/actions."""
        forgotten = self.condenser.forget(view)
        if forgotten:
            summary = f"({len(forgotten)} earlier events condensed)"
            return [
                new.new(CondensationEvent, source="agent", forgotten_event_ids=forgotten, summary=summary)
            ]
        from convdb.producers.messages import to_messages

        with tracing.span("llm.completion", attributes={"gen_ai.request.model": self.model}):
            reply = llm.complete(self.model, to_messages(view), [t.spec() for t in self.tools])
        events: list[Event] = [self._usage(reply, new)]
        if not reply.tool_calls:
            events.append(
                new.new(
                    MessageEvent,
                    source="agent",
                    role="assistant",
                    content=reply.content,
                    llm_response_id=reply.response_id,
                )
            )
            return events
        actions, errors = [], []
        for call in reply.tool_calls:
            try:
                actions.append(self._action(call, reply, new))
            except ToolArgumentError as exc:
                errors.append(
                    new.new(
                        AgentErrorEvent,
                        source="agent",
                        error=str(exc),
                        tool_name=call.name,
                        tool_call_id=call.id,
                    )
                )
        return [*events, *actions, *errors]

    def _usage(self, reply: LLMReply, new: EventFactory) -> LLMUsageEvent:
        return new.new(
            LLMUsageEvent,
            source="agent",
            model=reply.model,
            llm_response_id=reply.response_id,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            cost=reply.cost,
            latency_ms=reply.latency_ms,
            cached_tokens=reply.cached_tokens,
        )

    def _action(self, call: ToolCall, reply: LLMReply, new: EventFactory) -> ActionEvent:
        tool = self.tool(call.name)
        args = tool.parse(call.arguments)
        arguments = canonical_json(args)
        action_id = new.new_id()
        return new.new(
            ActionEvent,
            source="agent",
            id=action_id,
            tool_name=tool.name,
            tool_call_id=call.id,
            arguments=arguments,
            thought=reply.content,
            llm_response_id=reply.response_id,
            security_risk=self.security.assess(tool),
            operation_id=f"{new.conversation_id}/{action_id}",
            intent_hash=intent_hash(tool.name, arguments),
            target=tool.target(args),
            effect_class=tool.effect_class,
        )
