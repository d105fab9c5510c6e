"""Hosted mode: a LangGraph graph run by the fleet runner that owns its thread's partition.

A thread is a conversation (thread_id = conversation id). The runner creates a
`GraphConversation` for it (`GraphBook.conversation`) instead of an agent's conversation; its
inbox records drive the graph (`handle_inbox`): a user message is appended as a MessageEvent
(with the inbox offset, as for any conversation) and becomes the graph's input
`{"messages": [user message]}`; a `resume` record becomes `Command(resume=<content, as JSON if it
parses>)`; a `resolve` record (the human queue's decision on an operation) becomes
`Command(resume={interrupt id: {"decision": ..., "by": ..., "operation_id": ...}})`. While the
graph waits in `interrupt()`, each interrupt is an operation of unknown outcome on the ledger (the
human queue); the answer settles it. On assignment the runner's
takeover calls `run`/`resume` for a thread whose status is `running`: the graph goes on from its
last checkpoint (`invoke(None)`).

The graph's checkpointer is the partition's `HostedSaver`: every checkpoint, task write and
`@effect` ledger record is written through the conversation's `commit`, that is the partition's
fenced transactional writer (`{namespace}.runner.{partition}`): a zombie runner's write raises
`FencedError` and the runner drops the partition. Reads come from the saver's own fold of the
partition's graph records (read once, after the takeover fenced the previous owner). The
`messages` channel of every root checkpoint is projected into convdb events
(`convdb.projections.graph_messages`) in the checkpoint's transaction.
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from langgraph.types import Command

from convdb.infra.errors import InfraError, PublishError
from convdb.producers.conversation import Conversation, SnapshotBook
from convdb.producers.graph_effects import LedgerCall
from convdb.producers.graph_saver import ConvdbSaver
from convdb.producers.ledger import EMPTY as LEDGER_EMPTY
from convdb.producers.publisher import TransactionalPublisher
from convdb.producers.tools.base import canonical_json, intent_hash
from convdb.projections import graph
from convdb.projections.graph_messages import project_messages
from convdb.projections.operation import OperationState
from convdb.schemas import ActionEvent, AvroModel, InboxMessage, LedgerRecord, MessageEvent, SystemPromptEvent
from convdb.schemas.graph import GraphCheckpoint, GraphRecord

if TYPE_CHECKING:
    from convdb.producers.graph_book import GraphBook
    from convdb.producers.positions import LogPositions
    from convdb.producers.state import ConversationState

logger = logging.getLogger(__name__)

MESSAGES = "messages"
"""The channel projected into convdb events, and where a user message goes in."""

INTERRUPT_OPERATION = "interrupt:"
"""An interrupt's operation id is `{thread_id}/interrupt:{interrupt id}`."""

MAX_RUNS = 8
"""Invocations one `drive` makes at most (an unfinished run, then each unread user message)."""


class Owner(SnapshotBook, Protocol):
    """What hosting needs of a partition owner (`producers.fleet.owner.PartitionOwner`, which
    imports this module: a protocol keeps the dependency one way)."""

    partition: int
    ctx: Any
    publisher: TransactionalPublisher
    sink: Any

    @property
    def conversations(self) -> dict[str, Conversation]:
        """The partition's conversations by id (`PartitionOwner.conversations`)."""


class HostedSaver(ConvdbSaver):
    """The checkpointer of one owned partition: writes through its conversations' commits."""

    def __init__(self, owner: Owner) -> None:
        super().__init__(owner.ctx.settings, codec=owner.ctx.codec)
        self.owner = owner
        self._restored = False

    def _own(self, partition: int) -> Any:
        """The owner's writer; the partition's graph records are read on first use (after the
        owner's takeover fenced the previous one, so they are the whole committed truth)."""
        if partition != self.owner.partition:
            raise InfraError(
                f"a thread of partition {partition} is not hosted by the owner of partition "
                f"{self.owner.partition}: a hosted graph reads and writes its own thread only"
            )
        if not self._restored:
            self._restore(partition)
            self._restored = True
        return self.owner.publisher

    def _all_threads(self) -> dict[str, graph.ThreadGraph]:
        self._own(self.owner.partition)
        return self._threads

    def tenant_of(self, thread_id: str) -> str:
        """The conversation's tenant (its first inbox record fixed it)."""
        return self._conversation(thread_id).tenant_id

    def _conversation(self, thread_id: str) -> Conversation:
        conv = self.owner.conversations.get(thread_id)
        if conv is None:
            raise InfraError(f"thread {thread_id} is not a conversation of partition {self.owner.partition}")
        return conv

    def _commit(self, records: Sequence[GraphRecord]) -> None:
        """Each thread's records, with the events its `messages` channel adds, in one transaction
        of the partition's writer (its conversation's `commit`), then folded."""
        self.check_sizes(records)
        by_thread: dict[str, list[GraphRecord]] = {}
        for record in records:
            by_thread.setdefault(record.conversation_id, []).append(record)
        for thread_id, group in by_thread.items():
            conv = self._conversation(thread_id)
            conv.commit(lambda c=conv, g=group: [*g, *self._events(c, g)])  # type: ignore[misc]
            for r in group:
                self._threads[thread_id] = graph.fold(self._threads.get(thread_id, graph.EMPTY), r)

    def _events(self, conv: Conversation, group: Sequence[GraphRecord]) -> list[AvroModel]:
        """The convdb events of the new messages of the group's root checkpoints."""
        out: list[AvroModel] = []
        view = conv.state.view
        known = set(view.events)
        actions = {e.tool_call_id: e.id for e in view.events.values() if isinstance(e, ActionEvent)}
        for record in group:
            if not isinstance(record, GraphCheckpoint) or record.checkpoint_ns:
                continue
            for channel, kind, value in zip(
                record.blob_channels, record.blob_types, record.blob_values, strict=True
            ):
                if channel != MESSAGES or kind == "empty":
                    continue
                messages = self.load_value((kind, value))
                for p in project_messages(conv.conversation_id, messages or (), known, actions):
                    conv.start()  # (no-op but for a thread written before its first message)
                    out.append(conv.new(p.cls, source=p.source, **p.fields))
                    known.add(p.id)
        return out

    # -- the effect ledger: the conversation's own (`convdb.langgraph.effect`) ---------------------
    def operation(self, thread_id: str, operation_id: str) -> OperationState | None:
        """The operation's state in the conversation's ledger (folded at restore, kept by commits)."""
        with self._lock:
            self._thread(thread_id)
            return self._conversation(thread_id).ledger.get(operation_id)

    def commit_ledger(self, thread_id: str, records: Sequence[LedgerRecord]) -> OperationState | None:
        """Ledger records through the conversation's commit (the partition's fenced writer)."""
        with self._lock:
            self._thread(thread_id)
            conv = self._conversation(thread_id)
            conv.commit(lambda: list(records))
            return (conv.ledger or LEDGER_EMPTY).get(records[0].operation_id)

    def close(self) -> None:
        """Nothing to flush: the writer is the owner's."""


_bound: weakref.WeakKeyDictionary[Owner, dict[str, Any]] = weakref.WeakKeyDictionary()
"""Per partition owner: its HostedSaver (under "") and each graph bound to it."""


def bound_graph(book: GraphBook, owner: Owner, name: str) -> Any:
    """Graph `name` compiled (or copied) with the owner's hosted checkpointer, once per owner."""
    graphs = _bound.setdefault(owner, {})
    if name not in graphs:
        saver = graphs.setdefault("", HostedSaver(owner))
        made = book.get(name)
        graphs[name] = (
            made.compile(checkpointer=saver)
            if hasattr(made, "compile")
            else made.copy(update={"checkpointer": saver})
        )
    return graphs[name]


class GraphConversation(Conversation):
    """A conversation run by a LangGraph graph instead of an agent (see the module doc)."""

    graph: Any
    graph_name: str

    @classmethod
    def hosted(
        cls,
        book: GraphBook,
        owner: Owner,
        cid: str,
        tenant_id: str,
        name: str,
        *,
        state: ConversationState | None,
        positions: LogPositions | None,
    ) -> GraphConversation:
        """The conversation of thread `cid`, run by graph `name` on `owner`'s partition.

        Raises:
            UnknownAgentError, AgentLoadError: the graph does not load.
        """
        rt = owner.ctx.runtime
        compiled = bound_graph(book, owner, name)
        conv = cls(
            cid, tenant_id, rt.agent, owner.sink, rt.llm,
            runtime=owner.ctx.settings.runtime, secrets=rt.secrets, crash=rt.crash,
            state=state, positions=positions, book=owner, metrics=owner.ctx.metrics, agent_name=name,
        )  # fmt: skip
        conv.graph, conv.graph_name = compiled, name
        return conv

    @property
    def config(self) -> dict[str, Any]:
        """The graph's config for this thread."""
        return {"configurable": {"thread_id": self.conversation_id}}

    def start(self) -> None:
        """The first event names the graph (a restore finds which graph runs the thread there)."""
        if self.state.view.last_seq == 0:
            self.commit(
                lambda: [
                    self.new(
                        SystemPromptEvent, source="agent", content=f"LangGraph graph {self.graph_name}",
                        tools=(), agent=self.graph_name,
                    )
                ]
            )  # fmt: skip

    def handle_inbox(self, inbox: InboxMessage) -> None:
        """Do what an inbox record asks of the graph (the runner's dispatch for hosted threads)."""
        match inbox.command:
            case "message":
                self.send_message(inbox.content, event_id=inbox.id)
                self.drive()
            case "resume":
                self.answer(inbox)
            case "resolve":
                self.decide(inbox)
            case _:
                logger.warning(
                    "conversation %s runs a graph: inbox command %r is not applied",
                    self.conversation_id,
                    inbox.command,
                )

    def answer(self, inbox: InboxMessage) -> None:
        """A `resume` record answers the one interrupt the graph waits in: `Command(resume=<its
        content, as JSON if it parses>)`; a plain interrupt's operation is settled as confirmed."""
        interrupts = self.graph.get_state(self.config).interrupts
        if len(interrupts) == 1:
            operation = self._operation_of(interrupts[0])
            state = self.ledger.get(operation)
            if operation.startswith(f"{self.conversation_id}/{INTERRUPT_OPERATION}") and (
                state is not None and not (state.status and state.status.is_terminal)
            ):
                call = LedgerCall(self.graph.checkpointer, self.conversation_id, operation, "interrupt")
                answered = [
                    call.confirmed(inbox.content, "human"),
                    call.resolved("confirmed", inbox.sender, ""),
                ]
                self.commit(lambda: answered)
        self.drive(Command(resume=_json_or_text(inbox.content)))

    def decide(self, inbox: InboxMessage) -> None:
        """A human queue's decision on an operation that an interrupt waits on: the graph resumes
        with `Command(resume={interrupt id: {"decision", "by", "note", "operation_id"}})`; an
        interrupt of the graph's own (not an `@effect` call's) is then settled on the ledger."""
        operation = inbox.operation_id or ""
        waiting = {self._operation_of(i): i for i in self.graph.get_state(self.config).interrupts}
        interrupt = waiting.get(operation)
        if interrupt is None:
            logger.info("inbox %s: operation %s waits on no interrupt (settled already)", inbox.id, operation)
            self.drive()
            return
        decision = {"decision": inbox.content, "by": inbox.sender, "operation_id": operation, "note": ""}
        if operation.startswith(f"{self.conversation_id}/{INTERRUPT_OPERATION}"):
            call = LedgerCall(self.graph.checkpointer, self.conversation_id, operation, "interrupt")
            outcome = (
                call.failed(f"decided by {inbox.sender}")
                if inbox.content == "failed"
                else call.confirmed(json.dumps(decision), "human")
            )
            self.commit(lambda: [outcome, call.resolved(inbox.content, inbox.sender, "")])  # type: ignore[arg-type]
        self.drive(Command(resume={interrupt.id: decision}))

    def _operation_of(self, interrupt: Any) -> str:
        """The ledger operation an interrupt waits on: an `@effect` call's, or its own."""
        value = interrupt.value
        if isinstance(value, dict) and value.get("kind") == "effect_unknown" and value.get("operation_id"):
            return str(value["operation_id"])
        return f"{self.conversation_id}/{INTERRUPT_OPERATION}{interrupt.id}"

    def _queue(self, interrupts: Sequence[Any]) -> None:
        """Put the graph's own interrupts in the human queue: each is an operation whose outcome
        is unknown (proposed, started, unknown with the interrupt's value as evidence)."""
        records: list[AvroModel] = []
        for interrupt in interrupts:
            operation = self._operation_of(interrupt)
            if operation in self.ledger or not operation.startswith(
                f"{self.conversation_id}/{INTERRUPT_OPERATION}"
            ):
                continue
            value = canonical_json(interrupt.value)
            call = LedgerCall(self.graph.checkpointer, self.conversation_id, operation, "interrupt")
            records += [
                call.proposed("irreversible", intent_hash("interrupt", value)),
                call.started(1),
                call.unknown("the graph waits in interrupt() for a human's answer", value),
            ]
        if records:
            self.commit(lambda: records)

    def run(self) -> Any:
        """Go on with the graph: an unfinished run, then an unread user message."""
        return self.drive()

    def resume(self) -> Any:
        """As `run` (LangGraph re-runs an interrupted task from its last checkpoint)."""
        return self.drive()

    def drive(self, command: Command | None = None) -> Any:  # type: ignore[type-arg]
        """Invoke the graph until nothing is left to do; record the status it stops in.

        `command` (a resume) is given only to a graph that waits in an interrupt: a redelivered
        resume, or one for a run already resumed, changes nothing. A failure to write (fenced,
        broker) propagates to the runner; any other exception of the graph is status `error`.
        """
        given: set[str] = set()
        for _ in range(MAX_RUNS):
            snapshot = self.graph.get_state(self.config)
            waiting = bool(snapshot.interrupts)
            if command is not None and waiting:
                graph_input: Any = command
            elif snapshot.next and not waiting:
                graph_input = None
            elif (message := self._unread(snapshot.values, given)) is not None:
                given.add(message.id)
                graph_input = {MESSAGES: [{"role": "user", "content": message.content, "id": message.id}]}
            else:
                break
            command = None
            self.start()
            self.set_status("running", f"graph {self.graph_name}")
            try:
                self.graph.invoke(graph_input, self.config, durability="sync")
            except PublishError:
                raise
            except Exception as exc:  # noqa: BLE001 - the graph's own failure: recorded, not retried
                logger.exception("conversation %s: graph %s failed", self.conversation_id, self.graph_name)
                self.set_status("error", f"{type(exc).__name__}: {exc}"[:1000])
                break
        self._settle()
        return self.status

    def _unread(self, values: Any, given: set[str]) -> MessageEvent | None:
        """The last user message of the active branch that the graph's messages do not hold."""
        messages = values.get(MESSAGES, ()) if isinstance(values, dict) else ()
        held = {getattr(m, "id", None) for m in messages or ()}
        view = self.state.view
        leaf = view.events.get(view.active_leaf) if view.active_leaf else None
        while leaf is not None:
            if isinstance(leaf, MessageEvent) and leaf.role == "user":
                return None if leaf.id in held or leaf.id in given else leaf
            leaf = view.events.get(leaf.parent_id) if leaf.parent_id else None
        return None

    def _settle(self) -> None:
        """The status the graph stopped in (an interrupt waits for a human), then a snapshot."""
        if self.status == "running":
            interrupts = self.graph.get_state(self.config).interrupts
            if interrupts:
                self._queue(interrupts)
                values = [i.value for i in interrupts]
                self.set_status("waiting_for_human", json.dumps(values, default=str)[:1000])
            else:
                self.set_status("finished", f"graph {self.graph_name} ended")
        self.snapshot()


def _json_or_text(content: str) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return content
