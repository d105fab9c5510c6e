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

The graph's checkpointer is the partition's `HostedSaver` (`convdb.producers.graph_hosted`): the
graph's records go through the conversation's commits, its `messages` channel becomes convdb
events, and a fork of the graph is a convdb branch.

History commands in graph terms (checked first by `admit_branch` / `admit_fork`: a refusal is a
`HistoryCommandError`, and the runner dead-letters the record with it):

- `branch` at an event: the graph forks (`update_state(..., as_node="__copy__")`) from the root
  checkpoint that produced that event (`HostedSaver.fork_point`), so its projection switches the
  active leaf there (a new convdb branch), and the graph goes on from there (`drive`).
- `fork` into a new conversation: LangGraph's `copy_thread` of the source thread into the new one,
  with its `ForkEvent`, and (when the event is not the source's latest state) a `__copy__` of the
  checkpoint that produced it, all in one transaction; the runner then runs it (`drive`).
- `pause`: the graph is not invoked again (no unfinished run continued, no message given to it)
  until a `resume`, an answer or a decision: status `paused` with a `PauseEvent`. The runner
  handles a thread's inbox in order, in the thread that runs its graph, so a pause is applied when
  the invocation in progress has returned (it never cuts a superstep, nor the run, short).
- `cancel`: as for any conversation (`Conversation.cancel`): status `error`, reason `cancelled by
  ...`; the graph is not invoked again until a new message. An interrupt's operation stays open in
  the human queue (a decision on it resumes the graph, as it resumes a cancelled agent's run).
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langgraph.types import Command

from convdb.infra.errors import PublishError
from convdb.producers.conversation import Conversation
from convdb.producers.errors import HistoryCommandError
from convdb.producers.graph_effects import LedgerCall
from convdb.producers.graph_hosted import MESSAGES, HostedSaver, Owner
from convdb.producers.status import set_status
from convdb.producers.tools.base import canonical_json, intent_hash
from convdb.projections import graph
from convdb.projections.graph_messages import projected_event
from convdb.projections.view import path_to_root
from convdb.schemas import AvroModel, Event, InboxMessage, MessageEvent, PauseEvent, SystemPromptEvent
from convdb.schemas.validation import shown

if TYPE_CHECKING:
    from convdb.producers.graph_book import GraphBook
    from convdb.producers.positions import LogPositions
    from convdb.producers.state import ConversationState

logger = logging.getLogger(__name__)

INTERRUPT_OPERATION = "interrupt:"
"""An interrupt's operation id is `{thread_id}/interrupt:{interrupt id}`."""

MAX_RUNS = 8
"""Invocations one `drive` makes at most (an unfinished run, then each unread user message)."""


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
    fork_from: tuple[graph.ThreadGraph, str | None] | None
    """A checked history command's graph plan (`admit_branch`, `admit_fork`): the thread to copy
    (a fork's source; a branch's own) and the checkpoint to continue from (None: its latest)."""

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
        prefix: Sequence[Event] = (),
    ) -> GraphConversation:
        """The conversation of thread `cid`, run by graph `name` on `owner`'s partition (`prefix`:
        a fork's source path, as for an agent's conversation).

        Raises:
            UnknownAgentError, AgentLoadError: the graph does not load.
        """
        rt = owner.ctx.runtime
        compiled = bound_graph(book, owner, name)
        conv = cls(
            cid, tenant_id, rt.agent, owner.sink, rt.llm,
            runtime=owner.ctx.settings.runtime, secrets=rt.secrets, crash=rt.crash,
            state=state, positions=positions, book=owner, metrics=owner.ctx.metrics, agent_name=name,
            prefix=prefix,
        )  # fmt: skip
        conv.graph, conv.graph_name = compiled, name
        conv.fork_from = None
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
            case "branch":
                self.branch()
            case "fork":
                self.fork_in(inbox)
            case "pause":
                self.pause()
            case "cancel":
                self.cancel(inbox.sender)
            case _:
                logger.warning(
                    "conversation %s runs a graph: inbox command %r is not applied",
                    self.conversation_id,
                    inbox.command,
                )

    def answer(self, inbox: InboxMessage) -> None:
        """A `resume` record answers the one interrupt the graph waits in: `Command(resume=<its
        content, as JSON if it parses>)`; a plain interrupt's operation is settled as confirmed.
        A paused graph is resumed first (an empty `resume`, the API's, only resumes it)."""
        if self.status == "paused":
            self.set_status("running", f"resumed by {inbox.sender}")
            if not inbox.content:
                self.drive()
                return
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
        interrupt of the graph's own (not an `@effect` call's) is then settled on the ledger. A
        decision resumes a paused graph."""
        if self.status == "paused":
            self.set_status("running", f"resumed by {inbox.sender}'s decision")
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
        if self.status == "paused":
            self.snapshot()
            return self.status
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

    # -- history commands in graph terms (see the module doc) ---------------------------------
    def admit_branch(self, event: Event) -> None:
        """Check a branch at `event` before anything is written, and keep the checkpoint it forks from.

        Raises:
            HistoryCommandError: the graph waits in an interrupt, or no checkpoint holds the event.
        """
        cid = self.conversation_id
        if self.status == "waiting_for_human" or self.graph.get_state(self.config).interrupts:
            raise HistoryCommandError(
                f"branch of {cid}: its graph waits in interrupt() for an answer; answer or decide it "
                "first (a branch would leave it open in the human queue)"
            )
        state = self.graph.checkpointer.thread(cid)
        path = path_to_root(self.state.view, event.id)
        self.fork_from = (state, self._fork_point(state, path, "branch", cid))

    def admit_fork(self, record: InboxMessage) -> None:
        """Check a fork into this (new) conversation: its source must be a graph's thread whose
        checkpoints hold the fork point; keep what to copy.

        Raises:
            HistoryCommandError: the source has no graph records, or none holds the fork point.
        """
        source = record.source_conversation_id or ""
        state = self.graph.checkpointer.thread(source)
        if state.empty:
            raise HistoryCommandError(
                f"fork of {shown(source)} into {self.conversation_id}: the source has no LangGraph "
                f"checkpoints, so graph {self.graph_name!r} has nothing to go on from"
            )
        at = self._fork_point(state, self.loop.prefix, "fork", source)
        head = graph.latest(state, "")
        self.fork_from = (state, None if head is not None and head.checkpoint_id == at else at)

    def _fork_point(self, state: graph.ThreadGraph, path: Sequence[Event], what: str, cid: str) -> str:
        """The checkpoint a branch or fork at the last event of `path` continues from.

        Raises:
            HistoryCommandError: no message projected an event at or before it, or no checkpoint
                holds that message.
        """
        at = path[-1]
        projected = projected_event(path)
        if projected is None:
            raise HistoryCommandError(
                f"{what} of {cid} at event #{at.seq} ({at.kind}): no message of its graph is at or before "
                "it, so no checkpoint of the graph holds that point; pick a message, action, observation "
                "or usage event"
            )
        found = self.graph.checkpointer.fork_point(state, projected.id)
        if found is None:
            raise HistoryCommandError(
                f"{what} of {cid} at event #{at.seq}: no checkpoint of its graph holds the message of "
                f"event #{projected.seq} (the graph never took it in)"
            )
        return str(found)

    def _copy_checkpoint(self, checkpoint_id: str) -> None:
        """LangGraph's fork: a copy of a root checkpoint becomes the thread's latest one."""
        config = {"thread_id": self.conversation_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}
        self.graph.update_state({"configurable": config}, None, as_node="__copy__")

    def branch(self) -> None:
        """The graph forks from the checkpoint `admit_branch` found (its projection starts the convdb
        branch, in the same transaction), then goes on from there."""
        plan, self.fork_from = self.fork_from, None
        if plan is None or plan[1] is None:
            return
        self._copy_checkpoint(plan[1])
        self.drive()

    def fork_in(self, inbox: InboxMessage) -> None:
        """The new conversation's `ForkEvent`, a copy of the source thread and (when the fork point
        is not its latest state) a copy of the checkpoint there, in one transaction; then the
        graph goes on (an unfinished run; else it waits for a message)."""
        plan, self.fork_from = self.fork_from, None
        if plan is None or not self.loop.prefix or self.state.view.last_seq:
            return  # a redelivery: its ForkEvent is in the log
        source, at = plan
        saver = self.graph.checkpointer
        event = self.loop.prefix[-1].id
        first = lambda: [self.fork_event(inbox.source_conversation_id or "", event)]  # noqa: E731
        with saver.batch(self.conversation_id, first, project=False):
            saver.copy_from(source, self.conversation_id)
            if at is not None:
                self._copy_checkpoint(at)
        self.drive()

    def pause(self) -> None:
        """Status `paused` (with a `PauseEvent`): the graph is not invoked until a resume."""
        if self.status != "paused":
            why = "pause requested"
            set_status(self, "paused", why, before=lambda: [self.new(PauseEvent, source="user", reason=why)])
        self.snapshot()

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
