"""The Conversation: id, tenant, execution status, in-memory view, and every durable write.

All mutable state lives here (the Agent is frozen). Writes go through a `RecordSink`, first
durable, then folded into the view, so what the agent reads is always what the log holds.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeVar

from infra.settings import RuntimeSettings
from producers import _actions, _recover, _run
from producers import _records as rec
from producers._stats import RunStats
from producers.agent import Agent
from producers.conversation_types import STUCK_REPEATS
from producers.crashpoints import NO_CRASH, CrashPoints
from producers.ledger import EMPTY, Ledger, fold_ledger
from producers.llm import LLMClient
from producers.secrets import SecretsRegistry
from producers.sink import RecordSink
from producers.status import check_transition
from projections.view import ViewState, active_branch, fold, initial, path_to_root
from schemas import (
    ActionEvent,
    AvroModel,
    EffectResolved,
    Event,
    EventEnvelope,
    LedgerRecord,
    LLMUsageEvent,
    MessageEvent,
    Snapshot,
    StateUpdateEvent,
    SystemPromptEvent,
    UserRejectEvent,
)
from schemas._types import ExecutionStatus, Resolution
from schemas.topics import EFFECTS, EVENTS, STATE, Topic

logger = logging.getLogger(__name__)

E = TypeVar("E", bound=EventEnvelope)


class Place(NamedTuple):
    """Where an event goes in the conversation: its id, seq, parent and time."""

    id: str
    seq: int
    parent_id: str | None
    timestamp: datetime


def topic_of(record: AvroModel) -> Topic:
    """The topic a conversation record belongs on."""
    if isinstance(record, EventEnvelope):
        return EVENTS
    if isinstance(record, LedgerRecord):
        return EFFECTS
    if isinstance(record, Snapshot):
        return STATE
    raise TypeError(f"a conversation does not write {type(record).__name__}")


class Conversation:
    """One conversation and its run loop; implements `EventFactory` for the agent."""

    def __init__(
        self,
        conversation_id: str,
        tenant_id: str,
        agent: Agent,
        sink: RecordSink,
        llm: LLMClient,
        *,
        runtime: RuntimeSettings | None = None,
        secrets: SecretsRegistry | None = None,
        crash: CrashPoints = NO_CRASH,
        state: ViewState | None = None,
        status: ExecutionStatus = "idle",
        ledger: Ledger = EMPTY,
        prefix: Sequence[Event] = (),
    ) -> None:
        self.conversation_id = conversation_id
        self.tenant_id = tenant_id
        self.agent, self.sink, self.llm = agent, sink, llm
        self.runtime = runtime or RuntimeSettings()
        self.secrets = secrets or SecretsRegistry()
        self.crash = crash
        self.state = state or initial(conversation_id)
        self.status: ExecutionStatus = status
        self.ledger: Ledger = ledger
        self.prefix = tuple(prefix)
        self.stats = RunStats()
        self.inbox_offset = -1
        self.events_position: tuple[int, int] = (-1, -1)
        self._seq = self.state.last_seq
        self._leaf = self.state.active_leaf
        self._lock = threading.RLock()
        self.pause_requested = threading.Event()
        self.recent_steps: deque[object] = deque(maxlen=STUCK_REPEATS)

    # -- EventFactory ---------------------------------------------------------------
    def new_id(self) -> str:
        """A fresh event id."""
        return str(uuid.uuid4())

    def new(self, cls: type[E], *, source: str, **fields: Any) -> E:
        """An event placed after the current leaf, with the next seq (call inside `commit`)."""
        with self._lock:
            place = self.place(fields.pop("id", None), fields.pop("parent_id", self._leaf))
            return cls(
                id=place.id,
                conversation_id=self.conversation_id,
                tenant_id=self.tenant_id,
                seq=place.seq,
                timestamp=place.timestamp,
                source=source,
                parent_id=place.parent_id,
                **fields,
            )

    def place(self, event_id: str | None = None, parent_id: str | None = None) -> Place:
        """Reserve the next position (seq, after the current leaf unless `parent_id` says otherwise)
        for an event built elsewhere (call inside `commit`)."""
        with self._lock:
            self._seq += 1
            place = Place(event_id or self.new_id(), self._seq, parent_id or self._leaf, datetime.now(UTC))
            self._leaf = place.id
            return place

    # -- writes ---------------------------------------------------------------------
    def commit(self, build: Callable[[], Sequence[AvroModel]]) -> list[AvroModel]:
        """Build records, redact secrets, make them durable as one group, then fold them in.

        A `PublishError` leaves this object unusable: rebuild it from the log (`resume`).
        """
        with self._lock:
            records = [self.secrets.redact_record(r) for r in build()]
            started = time.perf_counter()
            deliveries = self.sink.write([(topic_of(r), r) for r in records])
            self.stats.add_publish_time(time.perf_counter() - started)
            for record in records:
                if isinstance(record, EventEnvelope):
                    self.state = fold(self.state, record)  # type: ignore[arg-type]
                elif isinstance(record, LedgerRecord):
                    self.ledger = fold_ledger(self.ledger, record)
            for record, delivery in zip(records, deliveries, strict=False):
                if isinstance(record, EventEnvelope) and delivery.offset >= 0:
                    self.events_position = (delivery.partition, delivery.offset + 1)
            return records

    def set_status(self, status: ExecutionStatus, reason: str = "") -> None:
        """Move the status machine and record the change (no-op when unchanged)."""
        with self._lock:
            if status == self.status:
                return
            check_transition(self.conversation_id, self.status, status)
            self.commit(
                lambda: [
                    self.new(StateUpdateEvent, source="environment", execution_status=status, reason=reason)
                ]
            )
            self.status = status

    def start(self) -> None:
        """Write the system prompt when the conversation has no event yet."""
        if self.state.last_seq == 0:
            tools = tuple(t.name for t in self.agent.tools)
            self.commit(
                lambda: [
                    self.new(SystemPromptEvent, source="agent", content=self.agent.system_prompt, tools=tools)
                ]
            )

    def send_message(self, content: str, *, event_id: str | None = None, source: str = "user") -> bool:
        """Append a user message; False when `event_id` is already in the log (a redelivery)."""
        with self._lock:
            if event_id is not None and event_id in self.state.events:
                return False
            self.start()
            if self.status == "waiting_for_confirmation":
                self.reject_pending("superseded by a new user message")
            self.commit(
                lambda: [
                    self.new(
                        MessageEvent,
                        source=source,
                        role="user",
                        content=content,
                        **({"id": event_id} if event_id else {}),
                    )
                ]
            )
            return True

    # -- reading ----------------------------------------------------------------------
    def view(self) -> tuple[Event, ...]:
        """What the agent reads: a fork's source path, then this conversation's active branch."""
        return (*self.prefix, *active_branch(self.state))

    def unanswered(self, message_id: str) -> bool:
        """True when event `message_id` is the active leaf: nothing has answered it yet."""
        return self.state.active_leaf == message_id

    def unobserved_actions(self) -> list[ActionEvent]:
        """Actions on the active branch with no observation or rejection yet, in log order."""
        path = path_to_root(self.state, self.state.active_leaf) if self.state.active_leaf else ()
        answered = {getattr(e, "action_id", None) for e in path if e.kind in ("observation", "user_reject")}
        return [e for e in path if isinstance(e, ActionEvent) and e.id not in answered]

    # -- the run loop -------------------------------------------------------------------
    def request_pause(self) -> None:
        """Ask a running loop to pause before its next step (thread-safe)."""
        self.pause_requested.set()

    def run(self) -> ExecutionStatus:
        """Step until finished, paused, waiting, stuck, or out of iterations/budget."""
        return _run.run(self)

    def needs_confirmation(self, actions: Sequence[ActionEvent]) -> bool:
        """True when the confirmation policy holds any of these actions."""
        return any(self.agent.confirmation.requires(a.security_risk) for a in actions)

    def total_cost(self) -> float:
        """LLM cost recorded in this conversation's log."""
        return sum(e.cost or 0.0 for e in self.state.log if isinstance(e, LLMUsageEvent))

    # -- confirmation, resolution, recovery -------------------------------------------------
    def confirm(self, approve: bool, reason: str = "") -> ExecutionStatus:
        """Approve (run) or reject the actions waiting for confirmation, then continue."""
        pending = [a for a in self.unobserved_actions() if a.operation_id not in self.ledger]
        if not approve:
            self.reject_pending(reason)
            return self.run()
        self.set_status("running", "actions confirmed")
        self.commit(lambda: [rec.proposed(self, a) for a in pending if a.effect_class != "read_only"])
        if _actions.Outcome.HUMAN in _actions.run_batch(self, pending):
            self.set_status("waiting_for_human", "an operation's outcome is unknown")
            self.snapshot()
            return self.status
        return self.run()

    def reject_pending(self, reason: str) -> None:
        """Reject every action that waits for confirmation."""
        pending = [a for a in self.unobserved_actions() if a.operation_id not in self.ledger]
        self.commit(
            lambda: [self.new(UserRejectEvent, source="user", action_id=a.id, reason=reason) for a in pending]
        )

    def resolve(
        self, operation_id: str, decision: Resolution, resolved_by: str, note: str = ""
    ) -> ExecutionStatus:
        """A human's decision on an unknown operation; then recovery and the run continue."""
        actions = {a.operation_id: a for a in self.unobserved_actions()}
        action = actions.get(operation_id)
        if action is None:
            raise KeyError(f"conversation {self.conversation_id}: no open operation {operation_id}")
        self.commit(
            lambda: [
                EffectResolved(
                    **rec._ledger(self, action), decision=decision, resolved_by=resolved_by, note=note
                )
            ]
        )
        return self.resume()

    def resume(self) -> ExecutionStatus:
        """Finish what a crash left half-done (per action, DESIGN §6), then continue the run."""
        return _recover.resume(self)

    # -- snapshots and forks ---------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Publish the base state (status, stats, secret names, open operations) to the state topic."""
        return self.commit(lambda: [rec.snapshot(self)])[0]  # type: ignore[return-value]

    def fork(
        self, conversation_id: str, *, at_event_id: str | None = None, snapshot_ref: str | None = None
    ) -> Conversation:
        """A new conversation continuing from an event of this one (see `_run.fork`)."""
        return _run.fork(self, conversation_id, at_event_id=at_event_id, snapshot_ref=snapshot_ref)
