"""The Conversation: identity, the state folded from its own records, durable writes, commands.

All mutable state lives here (the Agent is frozen). Every write goes through `commit`: durable
first, then folded into the state, so what the agent reads is what the log holds. Behaviour
lives in collaborators by role that see the conversation only as a `ConversationWriter`: the
run loop (`RunLoop`), the effect protocol (`EffectProtocol`) and recovery (`Recovery`).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from convdb.infra.producer import Delivery
from convdb.infra.settings import RuntimeSettings
from convdb.producers import records as rec
from convdb.producers._stats import RunStats
from convdb.producers.agent import Agent
from convdb.producers.crashpoints import NO_CRASH, CrashPoints
from convdb.producers.effect_protocol import EffectProtocol
from convdb.producers.ledger import Ledger
from convdb.producers.llm import LLMClient
from convdb.producers.observe import NO_METRICS, RunnerMetrics
from convdb.producers.outcome import Outcome
from convdb.producers.positions import LogPositions, base_snapshot
from convdb.producers.recovery import Recovery
from convdb.producers.run_loop import RunLoop
from convdb.producers.secrets import SecretsRegistry
from convdb.producers.sink import RecordSink, topic_of
from convdb.producers.state import ConversationState, fold, initial, unobserved_actions
from convdb.producers.status import CANCELLABLE, CANCELLED, set_status
from convdb.producers.writer import Place, Services
from convdb.projections.view import path_to_root
from convdb.schemas import (
    ActionEvent,
    ActiveLeafChangedEvent,
    AvroModel,
    Event,
    EventEnvelope,
    ForkEvent,
    MessageEvent,
    Snapshot,
    UserRejectEvent,
)
from convdb.schemas._types import ExecutionStatus, Resolution

E = TypeVar("E", bound=EventEnvelope)


class SnapshotBook(Protocol):
    """Who builds a conversation's snapshots and hears of its durable writes (its partition owner)."""

    def snapshot_record(self, conv: Conversation) -> Snapshot:
        """The snapshot of `conv` as it is now."""
        ...

    def committed(self, records: Sequence[AvroModel], deliveries: Sequence[Delivery]) -> None:
        """Records of a conversation are durable at these positions."""
        ...


class SoloBook:
    """The book of a conversation no partition owner keeps (tests, benchmarks): base snapshots."""

    def snapshot_record(self, conv: Conversation) -> Snapshot:
        """The base snapshot (no view, no partition offsets)."""
        return conv.base_snapshot()

    def committed(self, records: Sequence[AvroModel], deliveries: Sequence[Delivery]) -> None:
        """Nothing to keep."""


class Conversation:
    """One conversation: implements `ConversationWriter` for its collaborators and the agent."""

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
        state: ConversationState | None = None,
        positions: LogPositions | None = None,
        book: SnapshotBook | None = None,
        prefix: Sequence[Event] = (),
        metrics: RunnerMetrics = NO_METRICS,
        agent_name: str = "default",
    ) -> None:
        self.conversation_id = conversation_id
        self.tenant_id = tenant_id
        self.sink = sink
        self.services = Services(
            agent, llm, runtime or RuntimeSettings(), secrets or SecretsRegistry(), crash, metrics, agent_name
        )
        self.positions = positions or LogPositions()
        self.book: SnapshotBook = book or SoloBook()
        self.stats = RunStats()
        self._state = state or initial(conversation_id)
        self._seq = self._state.view.last_seq
        self._leaf = self._state.view.active_leaf
        self._lock = threading.RLock()
        self.effects = EffectProtocol(self, self.services, self.stats)
        self.recovery = Recovery(self, self.effects)
        self.loop = RunLoop(self, self.services, self.effects, self.stats, prefix)

    # -- ConversationWriter ---------------------------------------------------------------
    @property
    def state(self) -> ConversationState:
        """Everything folded from this conversation's records so far."""
        return self._state

    @property
    def status(self) -> ExecutionStatus:
        """The execution status the log says (the last StateUpdateEvent's)."""
        return self._state.status

    @property
    def ledger(self) -> Ledger:
        """The operations of this conversation's actions, by operation_id."""
        return self._state.ledger

    def new_id(self) -> str:
        """A fresh event id."""
        return str(uuid.uuid4())

    def new(self, cls: type[E], *, source: str, **fields: Any) -> E:
        """An event placed after the current leaf, with the next seq (call inside `commit`)."""
        with self._lock:
            place = self._place(fields.pop("id", None), fields.pop("parent_id", None))
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

    def place(self) -> Place:
        """Reserve the next position after the current leaf (call inside `commit`)."""
        return self._place(None, None)

    def _place(self, event_id: str | None, parent_id: str | None) -> Place:
        with self._lock:
            self._seq += 1
            place = Place(event_id or self.new_id(), self._seq, parent_id or self._leaf, datetime.now(UTC))
            self._leaf = place.id
            return place

    def commit(self, build: Callable[[], Sequence[AvroModel]]) -> list[AvroModel]:
        """Build records, redact secrets, make them durable as one group, then fold them in.

        A `PublishError` leaves this object unusable: its owner rebuilds it from the log.
        """
        with self._lock:
            records = [self.services.secrets.redact_record(r) for r in build()]
            started = time.perf_counter()
            deliveries = self.sink.write([(topic_of(r), r) for r in records])
            self.stats.add_publish_time(time.perf_counter() - started)
            self._fold(records)
            self.durable(records, deliveries)
            self.snapshot_if_due(records)
            return records

    def stage(
        self,
        build: Callable[[], Sequence[AvroModel]],
        check: Callable[[Sequence[AvroModel]], object] | None = None,
    ) -> list[AvroModel]:
        """Build, redact and fold in records that the owner's batch transaction commits later.

        `check` sees the redacted records first (what will be written) and may refuse them by
        raising; a refused or unfoldable group changes nothing here. Until the owner calls
        `durable`, this object is ahead of the log: a failed batch leaves it unusable, like a
        failed `commit` (its owner rebuilds it from the log).
        """
        with self._lock:
            records = [self.services.secrets.redact_record(r) for r in build()]
            if check is not None:
                check(records)
            self._fold(records)
            return records

    def _fold(self, records: Sequence[AvroModel]) -> None:
        # All or nothing: a record the fold refuses leaves the state as it was.
        state = self._state
        for record in records:
            state = fold(state, record)
        self._state = state

    def durable(self, records: Sequence[AvroModel], deliveries: Sequence[Delivery]) -> None:
        """Folded records are durable at these positions."""
        with self._lock:
            self.positions.track(records, deliveries, self._refold_offset)
            self.book.committed(records, deliveries)
            self.services.metrics.committed(records)

    def end_reports(self, status: str, reason: str, seq: int) -> list[AvroModel]:
        """A delegated child's report to its parent when it stops in an end status (else nothing)."""
        return self.effects.delegations.end_reports(status, reason, seq)

    def snapshot_if_due(self, records: Sequence[AvroModel] = ()) -> None:
        """Snapshot when `snapshot_every` events passed since the last one (unless `records` held one)."""
        with self._lock:
            due = self.positions.events_since_snapshot >= self.services.runtime.snapshot_every
            if due and not any(isinstance(r, Snapshot) for r in records):
                self.snapshot()

    def snapshot(self) -> Snapshot:
        """Publish the snapshot (base state, and what the owner adds) to the state topic."""
        with self._lock:
            snapshot = self.book.snapshot_record(self)
            self.commit(lambda: [snapshot])
            return snapshot

    def _refold_offset(self) -> int | None:
        unobserved = {a.operation_id for a in self.unobserved_actions()}
        return self.positions.refold_offset(self._state.ledger, unobserved)

    def base_snapshot(self) -> Snapshot:
        """The base state: status, stats, secret names, open operations, positions, cost."""
        return base_snapshot(
            self.conversation_id,
            self.tenant_id,
            self._state,
            self.positions,
            agent_json=self.services.agent.model_dump_json(),
            stats_json=json.dumps(self.stats.as_dict()),
            secret_names=self.services.secrets.names,
        )

    # -- commands ---------------------------------------------------------------------------
    def start(self) -> None:
        """Write the system prompt when the conversation has no event yet."""
        self.loop.start()

    def set_status(self, status: ExecutionStatus, reason: str = "") -> None:
        """Move the status machine by recording the change (no-op when unchanged)."""
        set_status(self, status, reason)

    def send_message(self, content: str, *, event_id: str | None = None, source: str = "user") -> bool:
        """Append a user message; False when `event_id` is already in the log (a redelivery)."""
        with self._lock:
            if event_id is not None and event_id in self._state.view.events:
                return False
            self.start()
            if self.status == "waiting_for_confirmation":
                self.reject_pending("superseded by a new user message")
            fields = {"id": event_id} if event_id else {}
            self.commit(
                lambda: [self.new(MessageEvent, source=source, role="user", content=content, **fields)]
            )
            return True

    def request_pause(self) -> None:
        """Ask a running loop to pause before its next step (thread-safe)."""
        self.loop.pause_requested.set()

    def cancel(self, by: str, also: Callable[[], Sequence[AvroModel]] = list) -> bool:
        """End the run for good: status `error`, reason `cancelled by <by>` (False: nothing to end).

        One write holds the status change, the rejection of actions waiting for confirmation (a
        later message does not run them), `also` (the cancels sent on to the children) and a
        delegated child's end report (`cancelled`), so a redelivered cancel finds all or nothing.
        An operation waiting for a human stays open: a human's decision on it resumes the run.
        The runner applies it between runs (a run in progress in another thread is not stopped).
        """
        with self._lock:
            if self.status not in CANCELLABLE:
                return False
            pending = (
                [a for a in self.unobserved_actions() if a.operation_id not in self.ledger]
                if self.status == "waiting_for_confirmation"
                else []
            )
            reason = f"{CANCELLED} by {by}"

            def first() -> list[AvroModel]:
                rejected = [
                    self.new(UserRejectEvent, source="user", action_id=a.id, reason=reason) for a in pending
                ]
                return [*rejected, *also()]

            set_status(self, "error", reason, before=first)
            self.snapshot()
            return True

    def run(self) -> ExecutionStatus:
        """Step until finished, paused, waiting, stuck, or out of iterations/budget."""
        return self.loop.run()

    def resume(self) -> ExecutionStatus:
        """Finish what a crash left half-done (per action, DESIGN §6), then continue the run."""
        stopped = self.recovery.resume()
        return self.run() if stopped is None else stopped

    def confirm(self, approve: bool, reason: str = "") -> ExecutionStatus:
        """Approve (run) or reject the actions waiting for confirmation, then continue."""
        pending = [a for a in self.unobserved_actions() if a.operation_id not in self.ledger]
        if not approve:
            self.reject_pending(reason)
            return self.run()
        self.set_status("running", "actions confirmed")
        self.commit(lambda: self.effects.proposals(pending))
        if Outcome.HUMAN in self.effects.run_batch(pending):
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
        """A human's decision on an open operation; then recovery and the run continue.

        Raises:
            KeyError: no unobserved action of this conversation has that operation on the ledger.
        """
        actions = {a.operation_id: a for a in self.unobserved_actions() if a.operation_id in self.ledger}
        action = actions.get(operation_id)
        if action is None:
            raise KeyError(f"conversation {self.conversation_id}: no open operation {operation_id}")
        self.commit(lambda: [rec.resolved(self, action, decision, resolved_by, note)])
        return self.resume()

    def fork(
        self, conversation_id: str, *, at_event_id: str | None = None, snapshot_ref: str | None = None
    ) -> Conversation:
        """A new conversation continuing after an event of this one, written through the same sink.

        It records a ForkEvent saying the workspace is shared unless `snapshot_ref` names a
        workspace snapshot; its agent reads this conversation's path up to that event first.
        """
        source_event = at_event_id or self._state.view.active_leaf
        if source_event is None:
            raise ValueError(f"conversation {self.conversation_id} has no event to fork from")
        services = self.services
        child = Conversation(
            conversation_id, self.tenant_id, services.agent, self.sink, services.llm,
            runtime=services.runtime, secrets=services.secrets, crash=services.crash,
            metrics=services.metrics, agent_name=services.agent_name,
            prefix=(*self.loop.prefix, *path_to_root(self._state.view, source_event)),
        )  # fmt: skip
        child.begin_fork(self.conversation_id, source_event, snapshot_ref=snapshot_ref)
        return child

    def begin_fork(
        self, source_conversation_id: str, source_event_id: str, *, snapshot_ref: str | None = None
    ) -> None:
        """Record that this (new) conversation continues after `source_event_id` of another one.

        Its agent reads the source's path up to that event first (the `prefix` it was built
        with); the workspace is shared unless `snapshot_ref` names a workspace snapshot.
        """
        source = source_conversation_id
        self.commit(lambda: [self.fork_event(source, source_event_id, snapshot_ref=snapshot_ref)])

    def fork_event(
        self, source_conversation_id: str, source_event_id: str, *, snapshot_ref: str | None = None
    ) -> ForkEvent:
        """The ForkEvent `begin_fork` writes (call inside `commit`)."""
        return self.new(
            ForkEvent, source="user", parent_id=source_event_id,
            source_conversation_id=source_conversation_id, source_event_id=source_event_id,
            workspace_shared=snapshot_ref is None, snapshot_ref=snapshot_ref,
        )  # fmt: skip

    def leaf_switch(self, leaf_id: str) -> ActiveLeafChangedEvent:
        """The branch switch `switch_leaf` writes, for a larger write (call inside `commit`): the
        next event built is placed after `leaf_id`."""
        with self._lock:
            # A branch switch is no node of the tree: the next event is placed after its target.
            event = self.new(ActiveLeafChangedEvent, source="user", leaf_event_id=leaf_id)
            self._leaf = leaf_id
            return event

    @property
    def leaf(self) -> str | None:
        """The event the next event built is placed after (the active leaf, ahead of it in `commit`)."""
        return self._leaf

    def switch_leaf(self, leaf_id: str) -> None:
        """Make `leaf_id` (an earlier event of this conversation) the active leaf: the agent reads
        the branch ending there, and the next event starts a new branch from it."""
        with self._lock:
            self.commit(lambda: [self.leaf_switch(leaf_id)])

    # -- reading ------------------------------------------------------------------------------
    def view(self) -> tuple[Event, ...]:
        """What the agent reads: a fork's source path, then this conversation's active branch."""
        return self.loop.view()

    def unanswered(self, message_id: str) -> bool:
        """True when event `message_id` is the active leaf: nothing has answered it yet."""
        return self._state.view.active_leaf == message_id

    def unobserved_actions(self) -> list[ActionEvent]:
        """Actions on the active branch with no observation or rejection yet, in log order."""
        return unobserved_actions(self._state.view)
