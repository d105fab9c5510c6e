"""Builds Conversations: new ones, or restored from the log (the wiring around `Conversation`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from infra.settings import Settings
from producers.agent import Agent
from producers.conversation import Conversation
from producers.crashpoints import NO_CRASH, CrashPoints
from producers.history import History, load_history
from producers.ledger import EMPTY, fold_ledger
from producers.llm import LLMClient
from producers.secrets import SecretsRegistry
from producers.sink import RecordSink
from projections.view import fold_all, initial, path_to_root
from schemas import Codec, Event, StateUpdateEvent
from schemas._types import ExecutionStatus

logger = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Everything a conversation needs besides its own state."""

    settings: Settings
    codec: Codec
    agent: Agent
    sink: RecordSink
    llm: LLMClient
    secrets: SecretsRegistry = field(default_factory=SecretsRegistry)
    crash: CrashPoints = NO_CRASH

    def create(self, conversation_id: str, tenant_id: str) -> Conversation:
        """A new, empty conversation."""
        return Conversation(
            conversation_id,
            tenant_id,
            self.agent,
            self.sink,
            self.llm,
            runtime=self.settings.runtime,
            secrets=self.secrets,
            crash=self.crash,
        )

    def load(self, conversation_id: str, tenant_id: str) -> Conversation:
        """The conversation rebuilt from the log, or a new one when it has no event yet."""
        history = load_history(self.settings, self.codec, conversation_id)
        if not history.events:
            return self.create(conversation_id, tenant_id)
        return self.restore(conversation_id, history)

    def restore(self, conversation_id: str, history: History) -> Conversation:
        """A Conversation whose view, status and ledger are folded from `history`."""
        state = fold_all(initial(conversation_id), history.events)
        ledger = EMPTY
        for record in [*history.ledger, *history.receipts]:
            ledger = fold_ledger(ledger, record)
        conv = Conversation(
            conversation_id,
            state.tenant_id or "",
            self.agent,
            self.sink,
            self.llm,
            runtime=self.settings.runtime,
            secrets=self.secrets,
            crash=self.crash,
            state=state,
            status=last_status(history.events),
            ledger=ledger,
            prefix=self._fork_prefix(state.forks[-1] if len(state.forks) else None),
        )
        conv.events_position = history.events_position
        if history.snapshot is not None:
            conv.inbox_offset = history.snapshot.inbox_offset
        return conv

    def _fork_prefix(self, fork: Event | None) -> tuple[Event, ...]:
        if fork is None:
            return ()
        source = self.load(fork.source_conversation_id, fork.tenant_id)  # type: ignore[attr-defined]
        return (*source.prefix, *path_to_root(source.state, fork.source_event_id))  # type: ignore[attr-defined]


def last_status(events: list[Event]) -> ExecutionStatus:
    """The execution status the log ends in ('idle' before any change)."""
    for event in reversed(events):
        if isinstance(event, StateUpdateEvent):
            return event.execution_status
    return "idle"
