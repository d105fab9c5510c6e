"""The small interface the run loop, the effect protocol and recovery write a conversation through.

`Conversation` implements it; the collaborators depend on this Protocol only (never on the class),
so each can be unit-tested against an in-memory writer, and no import cycle ties them together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypeVar

from convdb.infra.settings import RuntimeSettings
from convdb.producers.agent import Agent
from convdb.producers.crashpoints import CrashPoints
from convdb.producers.llm import LLMClient
from convdb.producers.observe import NO_METRICS, RunnerMetrics
from convdb.producers.secrets import SecretsRegistry
from convdb.producers.state import ConversationState
from convdb.schemas import AvroModel, EventEnvelope, Snapshot

E = TypeVar("E", bound=EventEnvelope)


class Place(NamedTuple):
    """Where an event goes in the conversation: its id, seq, parent and time."""

    id: str
    seq: int
    parent_id: str | None
    timestamp: datetime


class ConversationWriter(Protocol):
    """A conversation as its collaborators see it: its folded state, and durable writes."""

    @property
    def conversation_id(self) -> str:
        """The conversation's id."""
        ...

    @property
    def tenant_id(self) -> str:
        """The tenant its first record fixed."""
        ...

    @property
    def state(self) -> ConversationState:
        """Everything folded so far (replaced, never mutated, by `commit`)."""
        ...

    def new_id(self) -> str:
        """A fresh event id."""
        ...

    def new(self, cls: type[E], *, source: str, **fields: Any) -> E:
        """An event of `cls` at the next `place` (call inside `commit`'s build)."""
        ...

    def place(self) -> Place:
        """Reserve the next position after the current leaf (call inside `commit`'s build)."""
        ...

    def commit(self, build: Callable[[], Sequence[AvroModel]]) -> list[AvroModel]:
        """Build records, make them durable as one group, fold them into `state`; returns them."""
        ...

    def snapshot(self) -> Snapshot:
        """Record the base state on the state topic."""
        ...

    def end_reports(self, status: str, reason: str, seq: int) -> list[AvroModel]:
        """What a status change must also write (a delegated child's report to its parent)."""
        ...


@dataclass(frozen=True)
class Services:
    """What a conversation's collaborators use besides its state: configuration and ports."""

    agent: Agent
    llm: LLMClient
    runtime: RuntimeSettings
    secrets: SecretsRegistry
    crash: CrashPoints
    metrics: RunnerMetrics = NO_METRICS
    """The runner's Prometheus metrics (a conversation outside a runner counts nothing)."""
    agent_name: str = "default"
    """The name `agent` is loaded under (recorded in the conversation's SystemPromptEvent)."""
