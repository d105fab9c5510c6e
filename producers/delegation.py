"""Delegation: a parent conversation hands tasks to child conversations and folds their results back.

The protocol is the effect protocol's, with children as the provider:

- The parent's `task`/`delegate` action is one operation P. Its EffectStarted is written in ONE
  transaction with, per child i, the child's operation `P/child-i` (proposed and started, target
  `conversation:<child id>`) and the child's first inbox record. The child's conversation id and
  that record's id are derived from (P, i), so a parent that crashes and runs the step again
  writes the same record again at most (its runner recognises the id: no second child), and
  never a second child under another id.
- The child's log records its parent (SystemPromptEvent). When it stops in an end status
  (finished, error, stuck, waiting for a human or for confirmation), the StateUpdateEvent and a
  report to the parent's inbox are one transaction; a first record its runner refuses (another
  tenant's conversation, an id already taken) is reported as `rejected` with the dead letter.
- The parent records each report once, as the outcome of `P/child-i` on its ledger, and writes
  the action's one observation (each child's outcome and summary) when its wait condition holds:
  all children ended, the first K, or the deadline passed. Until then the parent's run stops
  (its status stays `running`: a takeover checks the condition again) and a late report is
  recorded without a second observation.

Pause, resume and cancel go down the tree (`propagate`): a cancelled child reports `cancelled`
(its status is `error`, its reason `cancelled by ...`), which its parent counts like any end.

Recursion is bounded by `delegation_max_depth` and width by `delegation_max_children`; a child id
is derived from the parent's operation, so a child can never be one of its ancestors.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from convdb.infra.agent_names import DEFAULT_AGENT, REFERENCE
from convdb.infra.partitioner import partition_for
from convdb.producers import records as rec
from convdb.producers.errors import ToolArgumentError
from convdb.producers.ledger import Ledger
from convdb.producers.outcome import Outcome
from convdb.producers.state import unobserved_actions
from convdb.producers.status import CANCELLED
from convdb.producers.tools.base import ToolResult, canonical_json, intent_hash
from convdb.producers.tools.delegation import CALL_TARGET, REPORT, ChildTask, DelegationTool
from convdb.producers.writer import ConversationWriter, Services
from convdb.projections.operation import OperationStatus
from convdb.projections.view import active_branch
from convdb.schemas import (
    ActionEvent,
    AvroModel,
    EffectConfirmed,
    EffectFailed,
    EffectProposed,
    EffectStarted,
    Event,
    InboxMessage,
    MessageEvent,
    StateUpdateEvent,
    SystemPromptEvent,
)
from convdb.schemas._types import InboxCommand

logger = logging.getLogger(__name__)

_NAMESPACE = uuid.UUID("6f1d2c4e-8a0b-4c3d-9e7f-5a6b7c8d9e0f")


class Effects(Protocol):
    """What delegation uses of the effect protocol (`EffectProtocol`)."""

    def proposals(self, actions: list[ActionEvent]) -> list[EffectProposed]:
        """EffectProposed for the actions."""
        ...

    def run_action(self, action: ActionEvent) -> Outcome:
        """Run an action whose proposal is durable."""
        ...

    def finish(self, action: ActionEvent, result: ToolResult) -> Outcome:
        """Write the observation and the ledger outcome."""
        ...

    def backfill_from_ledger(self, action: ActionEvent) -> Outcome:
        """Write the missing observation of a settled operation."""
        ...


END_STATUSES = frozenset({"finished", "error", "stuck", "waiting_for_human", "waiting_for_confirmation"})
"""A child's statuses that end its part of the task (its run returned, nothing of its own pending)."""

NEVER_DUE = timedelta(days=365)
"""`reconcile_after` of delegation operations: the reconciler has no provider to ask about a child;
the parent's deadline and its children's reports settle them."""


COST = "cost_usd"
"""The key of a child's reported spending in its ledger outcome (charged to the parent's budget)."""

SPREAD_TRIES = 64
"""Candidate ids per child: the first on a partition none of its elder siblings has is taken."""


def _candidate(child_operation: str, k: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{child_operation}#{k}"))


def children_ids(operation_id: str, count: int, partitions: int) -> list[str]:
    """The conversation ids of the children of a parent's operation: derived from the operation id (the
    same on every retry) and spread over the partitions (so over the runners) while there are free ones.

    Derived once, when the children are started: from then on their ids are read from the ledger (the
    child operations' targets), so another partition count later changes nothing.
    """
    ids: list[str] = []
    used: set[int] = set()
    for i in range(count):
        op = child_operation_id(operation_id, i)
        chosen = _candidate(op, 0)
        if len(used) < partitions:
            for k in range(SPREAD_TRIES):
                candidate = _candidate(op, k)
                if partition_for(candidate, partitions) not in used:
                    chosen = candidate
                    break
        used.add(partition_for(chosen, partitions))
        ids.append(chosen)
    return ids


def is_derived_child_id(child_operation: str, conversation_id: str) -> bool:
    """True when `conversation_id` is one of the ids a child operation may fix (its runner checks
    the child's first record against it: a record cannot start a child under any other id)."""
    return any(_candidate(child_operation, k) == conversation_id for k in range(SPREAD_TRIES))


def child_operation_id(operation_id: str, index: int) -> str:
    """The child's operation in its parent's ledger."""
    return f"{operation_id}/child-{index}"


def parent_operation_of(child_operation: str) -> tuple[str, int] | None:
    """(the parent's operation, the child's index) of a child operation id; None for another id."""
    head, sep, tail = child_operation.rpartition("/child-")
    return (head, int(tail)) if sep and tail.isdigit() else None


def first_record_id(operation_id: str, index: int) -> str:
    """The id of the child's first inbox record (its MessageEvent's id: the idempotency key)."""
    return str(uuid.uuid5(_NAMESPACE, f"{operation_id}#child-{index}#first"))


@dataclass(frozen=True)
class Link:
    """A child conversation's place in its task tree, as its SystemPromptEvent records it."""

    parent_conversation_id: str
    parent_operation_id: str
    """The parent's operation that started this child (`P/child-i` in the parent's ledger)."""
    depth: int
    budget_usd: float | None = None


def link_of(events: tuple[Event, ...] | list[Event]) -> Link | None:
    """The parent link the first SystemPromptEvent of `events` records; None for a root."""
    for event in events:
        if isinstance(event, SystemPromptEvent):
            if event.parent_conversation_id is None or event.parent_operation_id is None:
                return None
            return Link(
                event.parent_conversation_id,
                event.parent_operation_id,
                event.delegation_depth,
                event.budget_usd,
            )
    return None


def link_from_inbox(inbox: InboxMessage) -> Link | None:
    """The parent link a child's first inbox record carries; None for any other record."""
    if inbox.parent_conversation_id is None or inbox.parent_operation_id is None:
        return None
    return Link(
        inbox.parent_conversation_id, inbox.parent_operation_id, inbox.delegation_depth or 1, inbox.budget_usd
    )


def summary_of(events: tuple[Event, ...] | list[Event]) -> str:
    """A child's summary: the result of its last `report` call (an explicit result) when it made one,
    else its last assistant message (empty when it has none)."""
    last_message: str | None = None
    for event in reversed(events):
        if isinstance(event, ActionEvent) and event.tool_name == REPORT:
            reported = _reported(event.arguments)
            if reported is not None:
                return reported
        if last_message is None and isinstance(event, MessageEvent) and event.role == "assistant":
            last_message = event.content
    return last_message or ""


def _reported(arguments: str) -> str | None:
    """The `result` of a `report` call's arguments (None for arguments that hold none)."""
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return None
    result = value.get("result") if isinstance(value, dict) else None
    return result if isinstance(result, str) and result else None


def ended_by_cancel(events: tuple[Event, ...] | list[Event]) -> bool:
    """True when the branch's last status change is a cancel and no user message came after it: a
    child's report is then recorded and observed, but the run is not continued."""
    for event in reversed(events):
        if isinstance(event, MessageEvent) and event.role == "user":
            return False
        if isinstance(event, StateUpdateEvent):
            return event.execution_status == "error" and event.reason.startswith(CANCELLED)
    return False


def report(
    child_id: str,
    tenant_id: str,
    link: Link,
    status: str,
    summary: str,
    *,
    report_id: str,
    cost: float | None = None,
) -> InboxMessage:
    """A child's end, as a record for its parent's inbox (`operation_id`: the child's operation there;
    `cost`: what the child's subtree spent, charged to the parent's budget)."""
    return InboxMessage(
        id=report_id,
        conversation_id=link.parent_conversation_id,
        tenant_id=tenant_id,
        timestamp=datetime.now(UTC),
        command="resume",
        content=summary,
        sender=f"conversation:{child_id}",
        operation_id=link.parent_operation_id,
        child_conversation_id=child_id,
        child_status=status,
        child_cost_usd=cost,
    )


def split_budget(left: float | None, asked: list[float | None]) -> list[float | None]:
    """The children's budgets, taken from what is left of the parent's: a child that asks for an
    amount gets it (while there is some left), the others share the rest equally. With no budget
    on the parent (None), a child gets what it asks for, or the runner's limit (None)."""
    if left is None:
        return list(asked)
    out: list[float | None] = []
    for amount in asked:
        given = None if amount is None else min(amount, left)
        left -= given or 0.0
        out.append(given)
    share = left / max(1, sum(1 for a in asked if a is None))
    return [share if given is None else given for given in out]


def child_status(status: str, reason: str) -> str:
    """How a child ended, as its report says (`budget` for an error that is a spent budget,
    `cancelled` for one that is a cancel)."""
    if status == "error" and reason.startswith("budget"):
        return "budget"
    return CANCELLED if status == "error" and reason.startswith(CANCELLED) else status


class Delegations:
    """The delegation side of one conversation: as a parent (start, collect, observe) and as a child
    (its link and its end reports)."""

    def __init__(self, writer: ConversationWriter, services: Services, effects: Effects) -> None:
        self.writer = writer
        self.services = services
        self.effects = effects
        self._link: Link | None = None
        self._link_read = False
        self.partitions = 1
        """Partitions of the topics (set by the partition owner): children are spread over them."""
        self._charged: tuple[Ledger, float] | None = None
        """(the ledger it was summed from, what ended children reported spending): see `spent`."""
        self.pending_link: Link | None = None
        """The link of a child whose first record is being applied (recorded by its system prompt)."""

    # -- as a child ---------------------------------------------------------------------------
    @property
    def link(self) -> Link | None:
        """This conversation's parent link (None for a root): read from its log once, then kept."""
        if not self._link_read and self.writer.state.view.last_seq:
            self._link = link_of(active_branch(self.writer.state.view))
            self._link_read = True
        return self._link

    def prompt_fields(self) -> dict[str, Any]:
        """The SystemPromptEvent fields recording a new child's link (none for a root)."""
        link = self.pending_link
        if link is None:
            return {}
        return {
            "parent_conversation_id": link.parent_conversation_id,
            "parent_operation_id": link.parent_operation_id,
            "delegation_depth": link.depth,
            "budget_usd": link.budget_usd,
        }

    def spent(self) -> float:
        """What this conversation's budget is charged: its own LLM cost plus what each child that
        ended reported its subtree spent (a child is charged when it reports, not while it runs)."""
        ledger = self.writer.state.ledger
        if self._charged is None or self._charged[0] is not ledger:  # the ledger is replaced on change
            self._charged = (ledger, _children_cost(ledger))
        return self.writer.state.cost + self._charged[1]

    def budget(self) -> float | None:
        """The tighter of the runner's budget and the one the parent gave."""
        limits = [
            b
            for b in (self.services.runtime.max_budget_usd, self.link.budget_usd if self.link else None)
            if b is not None
        ]
        return min(limits) if limits else None

    def end_reports(self, status: str, reason: str, seq: int) -> list[AvroModel]:
        """The report to the parent when this child stops in an end status (written with the status)."""
        link = self.link
        if link is None or status not in END_STATUSES:
            return []
        branch = active_branch(self.writer.state.view)
        child_id = self.writer.conversation_id
        report_id = str(uuid.uuid5(_NAMESPACE, f"{child_id}#end@{seq}"))
        return [
            report(
                child_id,
                self.writer.tenant_id,
                link,
                child_status(status, reason),
                summary_of(branch),
                report_id=report_id,
                cost=self.spent(),
            )
        ]

    # -- as a parent --------------------------------------------------------------------------
    def tool_of(self, action: ActionEvent) -> DelegationTool | None:
        """The delegation tool an action calls, or None for any other tool."""
        try:
            tool = self.services.agent.tool(action.tool_name)
        except ToolArgumentError:
            return None
        return tool if isinstance(tool, DelegationTool) else None

    def refusal(self, tool: DelegationTool, args: dict[str, Any]) -> str | None:
        """Why this call may not start children (depth or width limit), or None."""
        runtime = self.services.runtime
        depth = self.link.depth if self.link else 0
        if depth >= runtime.delegation_max_depth:
            return (
                f"{tool.name}: refused: this conversation is at depth {depth} of its task tree and the "
                f"limit is {runtime.delegation_max_depth} (CONVDB_RUNTIME__DELEGATION_MAX_DEPTH)"
            )
        count = len(tool.children(args))
        if count > runtime.delegation_max_children:
            return (
                f"{tool.name}: refused: {count} children asked, at most {runtime.delegation_max_children} "
                "(CONVDB_RUNTIME__DELEGATION_MAX_CHILDREN)"
            )
        return None

    def start(self, action: ActionEvent, tool: DelegationTool, args: dict[str, Any]) -> Outcome:
        """Start the children (one transaction with EffectStarted), then see whether to observe."""
        refused = self.refusal(tool, args)
        if refused is not None:
            return self.effects.finish(action, ToolResult(refused, is_error=True))
        state = self.writer.state.ledger.get(action.operation_id)
        if state is None or state.status is not OperationStatus.PROPOSED:
            return self.check(action)  # started before (a redelivery): the children exist
        children = tool.children(args)
        self.writer.commit(lambda: self._start_records(action, children))
        self.services.crash.hit("after_children_started", tool.name)
        return self.check(action)

    def _start_records(self, action: ActionEvent, children: list[ChildTask]) -> list[AvroModel]:
        records: list[AvroModel] = [rec.started(self.writer, action, 1)]
        depth = (self.link.depth if self.link else 0) + 1
        budgets = split_budget(self._budget_left(), [task.budget_usd for task in children])
        ids = children_ids(action.operation_id, len(children), self.partitions)
        for i, task in enumerate(children):
            op = child_operation_id(action.operation_id, i)
            child = ids[i]
            now = datetime.now(UTC)
            base = {
                "operation_id": op,
                "conversation_id": self.writer.conversation_id,
                "tenant_id": self.writer.tenant_id,
                "timestamp": now,
            }
            arguments = canonical_json(task.model_dump())
            records.append(
                EffectProposed(
                    id=str(uuid.uuid4()), **base, action_id=action.id, tool_name=action.tool_name,
                    intent_hash=intent_hash(action.tool_name, arguments), target=f"conversation:{child}",
                    effect_class="keyed", reconcile_after=now + NEVER_DUE,
                )
            )  # fmt: skip
            records.append(EffectStarted(id=str(uuid.uuid4()), **base, attempt=1))
            records.append(
                InboxMessage(
                    id=first_record_id(action.operation_id, i), conversation_id=child,
                    tenant_id=self.writer.tenant_id, timestamp=now, command="message",
                    content=task.message, sender=f"conversation:{self.writer.conversation_id}",
                    agent=task.agent or self._own_agent(), parent_conversation_id=self.writer.conversation_id,
                    parent_operation_id=op, delegation_depth=depth,
                    budget_usd=budgets[i],
                )
            )  # fmt: skip
        return records

    def _own_agent(self) -> str | None:
        """The parent's agent for a child that names none (None: the runner's default)."""
        name = self.services.agent_name
        return None if name == DEFAULT_AGENT or REFERENCE.match(name) else name

    def _budget_left(self) -> float | None:
        budget = self.budget()
        return None if budget is None else max(0.0, budget - self.spent())

    def _call(self, action: ActionEvent) -> tuple[DelegationTool, dict[str, Any]] | None:
        tool = self.tool_of(action)
        if tool is None:
            return None
        try:
            return tool, tool.parse(self.services.secrets.reveal(action.arguments))
        except ToolArgumentError:
            return None

    def ended(self, action: ActionEvent, count: int) -> dict[int, dict[str, str]]:
        """The children of an action that reported, by index: their status and summary."""
        ledger = self.writer.state.ledger
        out = {}
        for i in range(count):
            state = ledger.get(child_operation_id(action.operation_id, i))
            if state is not None and state.status is not None and state.status.is_terminal:
                text = state.result if state.status is OperationStatus.CONFIRMED else state.error
                try:
                    out[i] = json.loads(text)
                except json.JSONDecodeError:
                    out[i] = {"status": "unknown", "summary": text}
                out[i].pop(COST, None)  # charged to the budget, not part of the observation
        return out

    def deadline(self, action: ActionEvent) -> datetime | None:
        """When the parent stops waiting for this action's children, if its call set a deadline."""
        call = self._call(action)
        seconds = call[0].deadline_s(call[1]) if call else None
        return None if seconds is None else action.timestamp + timedelta(seconds=seconds)

    def check(self, action: ActionEvent, now: datetime | None = None) -> Outcome:
        """Write the action's observation when its wait condition holds; WAITING otherwise."""
        call = self._call(action)
        if call is None:
            raise ValueError(f"{action.operation_id}: not a delegation call")
        tool, args = call
        count = len(tool.children(args))
        ended = self.ended(action, count)
        deadline = self.deadline(action)
        timed_out = deadline is not None and (now or datetime.now(UTC)) >= deadline
        if len(ended) < tool.wait_for(args) and not timed_out:
            return Outcome.WAITING
        return self.effects.finish(
            action, self._result(action, count, ended, timed_out and len(ended) < count)
        )

    def _result(
        self, action: ActionEvent, count: int, ended: dict[int, dict[str, str]], timed_out: bool
    ) -> ToolResult:
        children = []
        for i in range(count):
            end = ended.get(i, {"status": "timed_out" if timed_out else "running", "summary": ""})
            state = self.writer.state.ledger.get(child_operation_id(action.operation_id, i))
            child = (state.target or "") if state is not None else ""
            children.append({"conversation_id": child.removeprefix("conversation:"), **end})
        finished = sum(1 for c in children if c["status"] == "finished")
        content = canonical_json(
            {"children": children, "ended": len(ended), "finished": finished, "timed_out": timed_out}
        )
        return ToolResult(content, provider_receipt=f"children:{len(ended)}/{count}", is_error=finished == 0)

    def waiting(self) -> list[ActionEvent]:
        """Delegation actions of this conversation that wait for children (started, not observed).

        The ledger is looked at first: a conversation with no delegation call open (nearly all of
        them, at every run) never walks its branch for it.
        """
        ledger = self.writer.state.ledger
        open_calls = {
            op
            for op, state in ledger.items()
            if state.status is OperationStatus.EXECUTING and state.target == CALL_TARGET
        }
        if not open_calls:
            return []
        return [a for a in unobserved_actions(self.writer.state.view) if a.operation_id in open_calls]

    def receive(self, inbox: InboxMessage) -> Outcome | None:
        """Record a child's report once; the outcome of its action when it got observed, else None."""
        op = inbox.operation_id or ""
        parsed = parent_operation_of(op)
        ledger = self.writer.state.ledger
        state = ledger.get(op)
        child = inbox.child_conversation_id
        if parsed is None or state is None or state.target != f"conversation:{child}":
            logger.warning(
                "inbox %s: report of %s for %r is not one of this conversation's children",
                inbox.id,
                child,
                op,
            )
            return None
        if state.status is not None and state.status.is_terminal:
            logger.info("inbox %s: child %s already reported", inbox.id, child)
            return None
        ended = {"status": inbox.child_status or "unknown", "summary": inbox.content}
        cost = {} if inbox.child_cost_usd is None else {COST: inbox.child_cost_usd}
        outcome = canonical_json({**ended, **cost})
        base = {
            "id": str(uuid.uuid5(_NAMESPACE, f"{op}#reported")), "operation_id": op,
            "conversation_id": self.writer.conversation_id, "tenant_id": self.writer.tenant_id,
            "timestamp": datetime.now(UTC), "origin": "receipt",
        }  # fmt: skip
        record: AvroModel = (
            EffectConfirmed(**base, provider_receipt=child, result=outcome)
            if inbox.child_status == "finished"
            else EffectFailed(**base, error=outcome)
        )
        self.writer.commit(lambda: [record])
        self.services.crash.hit("after_child_report", "delegate")
        action = next((a for a in _unobserved(self.writer) if a.operation_id == parsed[0]), None)
        if action is None:
            logger.info("inbox %s: child %s reported after its parent observed", inbox.id, child)
            return None
        outcome_now = self.check(action)
        return outcome_now if outcome_now is Outcome.DONE else None

    def open_children(self) -> list[str]:
        """The children this conversation started that have not reported yet (their ids)."""
        return sorted(
            state.target.removeprefix("conversation:")
            for op, state in self.writer.state.ledger.items()
            if state.status is OperationStatus.EXECUTING
            and state.target is not None
            and state.target.startswith("conversation:")
            and parent_operation_of(op) is not None
        )

    def propagate(self, command: InboxCommand, inbox_id: str) -> int:
        """Send `command` (pause, resume, cancel) on to every child still working, in one write (the
        inbox record's offset commits with it: a redelivery after a crash sends it at most again,
        under the same ids). Returns how many children it went to."""
        children = self.open_children()
        if children:
            self.writer.commit(lambda: self.propagation(command, inbox_id))
        return len(children)

    def propagation(self, command: InboxCommand, inbox_id: str) -> list[AvroModel]:
        """The records sending `command` on to every child still working (ids derived from the
        inbox record's: the same on a redelivery)."""
        parent = self.writer.conversation_id
        return [
            InboxMessage(
                id=str(uuid.uuid5(_NAMESPACE, f"{inbox_id}#{child}")),
                conversation_id=child,
                tenant_id=self.writer.tenant_id,
                timestamp=datetime.now(UTC),
                command=command,
                sender=f"conversation:{parent}",
            )  # fmt: skip
            for child in self.open_children()
        ]

    def recover(self, action: ActionEvent) -> Outcome:
        """The recovery step of a delegation action without observation (after a crash)."""
        state = self.writer.state.ledger.get(action.operation_id)
        status = state.status if state is not None else None
        if status is None:
            self.writer.commit(lambda: self.effects.proposals([action]))
            return self.effects.run_action(action)
        if status is OperationStatus.PROPOSED:
            return self.effects.run_action(action)
        if status is OperationStatus.EXECUTING:
            return self.check(action)
        if status.is_terminal:
            return self.effects.backfill_from_ledger(action)
        return Outcome.HUMAN


def _children_cost(ledger: Ledger) -> float:
    """The sum of what the children that ended reported spending (their ledger outcomes' `cost_usd`)."""
    total = 0.0
    for op, state in ledger.items():
        if parent_operation_of(op) is None or state.status is None or not state.status.is_terminal:
            continue
        text = state.result if state.status is OperationStatus.CONFIRMED else state.error
        try:
            cost = json.loads(text or "{}").get(COST)
        except (json.JSONDecodeError, AttributeError):
            continue
        if isinstance(cost, int | float) and cost == cost and cost > 0:
            total += float(cost)
    return total


def _unobserved(writer: ConversationWriter) -> list[ActionEvent]:
    return unobserved_actions(writer.state.view)
