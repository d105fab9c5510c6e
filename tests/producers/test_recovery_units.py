"""Settle, recovery and the run loop's stuck check against an in-memory writer: the decisions,
without a broker.

The collaborators see a conversation only as a `ConversationWriter`; `MemoryWriter` folds what
they commit into a `ConversationState` and keeps the records, so each test reads what they wrote.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

import pytest
from pydantic import PrivateAttr

from convdb.infra.settings import RuntimeSettings
from convdb.producers import records as rec
from convdb.producers._stats import RunStats
from convdb.producers.agent import Agent
from convdb.producers.crashpoints import NO_CRASH
from convdb.producers.effect_protocol import EffectProtocol
from convdb.producers.errors import OutcomeUnknownError
from convdb.producers.llm import DirectScriptedClient
from convdb.producers.outcome import Outcome
from convdb.producers.recovery import Recovery
from convdb.producers.run_loop import RunLoop
from convdb.producers.secrets import SecretsRegistry
from convdb.producers.state import ConversationState, fold, initial
from convdb.producers.tools.base import Operation, Tool, ToolArgs, ToolResult
from convdb.producers.writer import Place, Services
from convdb.projections.effects import transition_id
from convdb.projections.settlement import MAX_ATTEMPTS
from convdb.schemas import (
    ActionEvent,
    AvroModel,
    EffectConfirmed,
    EffectProposed,
    EffectResolved,
    EffectStarted,
    EffectUnknown,
    EventEnvelope,
    MessageEvent,
    ObservationEvent,
    Receipt,
    Snapshot,
    StateUpdateEvent,
)
from convdb.schemas._types import EffectClass

E = TypeVar("E", bound=EventEnvelope)
CID = "conv-unit"


class MemoryWriter:
    """A `ConversationWriter` that keeps its records in memory."""

    conversation_id = CID
    tenant_id = "t"

    def __init__(self) -> None:
        self.state: ConversationState = initial(CID)
        self.records: list[AvroModel] = []
        self.snapshots = 0
        self._seq = 0
        self._leaf: str | None = None

    def new_id(self) -> str:
        return str(uuid.uuid4())

    def place(self) -> Place:
        self._seq += 1
        place = Place(self.new_id(), self._seq, self._leaf, datetime.now(UTC))
        self._leaf = place.id
        return place

    def new(self, cls: type[E], *, source: str, **fields: Any) -> E:
        place = self.place()
        return cls(
            id=place.id, conversation_id=CID, tenant_id="t", seq=place.seq, timestamp=place.timestamp,
            source=source, parent_id=place.parent_id, **fields,
        )  # fmt: skip

    def commit(self, build: Callable[[], Sequence[AvroModel]]) -> list[AvroModel]:
        records = list(build())
        for record in records:
            self.state = fold(self.state, record)
        self.records += records
        return records

    def snapshot(self) -> Snapshot:
        self.snapshots += 1
        return Snapshot(
            conversation_id=CID, tenant_id="t", timestamp=datetime.now(UTC), last_seq=self._seq,
            execution_status=self.state.status,
        )  # fmt: skip

    def end_reports(self, status: str, reason: str, seq: int) -> list[AvroModel]:  # noqa: ARG002
        return []  # a root conversation reports to nobody

    def written(self, kind: type) -> list[Any]:
        return [r for r in self.records if isinstance(r, kind)]


class Args(ToolArgs):
    """A key the fake provider files things under."""

    key: str = "k"


class FakeTool(Tool):
    """A provider in memory: counts calls per operation; `lookup` answers from what it did."""

    name: ClassVar[str] = "fake"
    description: ClassVar[str] = "A fake provider."
    effect_class: ClassVar[EffectClass] = "keyed"
    Args: ClassVar[type[ToolArgs]] = Args
    supports_lookup: ClassVar[bool] = True
    _calls: dict[str, int] = PrivateAttr(default_factory=dict)
    _done: set[str] = PrivateAttr(default_factory=set)
    _lookup_down: bool = PrivateAttr(default=False)
    _drop_answers: int = PrivateAttr(default=0)

    def execute(self, operation: Operation) -> ToolResult:
        self._calls[operation.operation_id] = self._calls.get(operation.operation_id, 0) + 1
        self._done.add(operation.operation_id)
        if self._drop_answers:
            self._drop_answers -= 1
            raise OutcomeUnknownError("connection dropped")
        return ToolResult("done", provider_receipt=f"rcpt-{operation.operation_id}")

    def lookup(self, operation: Operation) -> ToolResult | None:
        if self._lookup_down:
            raise OutcomeUnknownError("provider down")
        if operation.operation_id in self._done:
            return ToolResult("found it", provider_receipt=f"rcpt-{operation.operation_id}")
        return None

    def calls(self, op: str) -> int:
        return self._calls.get(op, 0)


class NoLookupTool(FakeTool):
    """An irreversible provider that cannot be asked."""

    name: ClassVar[str] = "irreversible"
    effect_class: ClassVar[EffectClass] = "irreversible"
    supports_lookup: ClassVar[bool] = False


@pytest.fixture
def tool() -> FakeTool:
    return FakeTool()


@pytest.fixture
def blind() -> NoLookupTool:
    return NoLookupTool()


@pytest.fixture
def writer() -> MemoryWriter:
    return MemoryWriter()


def protocol(writer: MemoryWriter, *tools: Tool) -> EffectProtocol:
    services = Services(
        Agent(tools=tools), DirectScriptedClient(), RuntimeSettings(), SecretsRegistry(), NO_CRASH
    )
    return EffectProtocol(writer, services, RunStats())


def action(writer: MemoryWriter, tool: Tool, *, status: str = "running") -> ActionEvent:
    """A user message and one action of `tool` on the active branch, the run `status`."""

    def build() -> list[AvroModel]:
        message = writer.new(MessageEvent, source="user", role="user", content="go")
        running = writer.new(StateUpdateEvent, source="environment", execution_status=status)
        place = writer.place()
        act = ActionEvent(
            id=place.id, conversation_id=CID, tenant_id="t", seq=place.seq, timestamp=place.timestamp,
            source="agent", parent_id=place.parent_id, tool_name=tool.name, tool_call_id="call-1",
            arguments='{"key":"k"}', llm_response_id="r1", operation_id=f"{CID}/{place.id}",
            intent_hash="h", effect_class=tool.effect_class,
        )  # fmt: skip
        return [message, running, act]

    return writer.commit(build)[-1]  # type: ignore[return-value]


def ledger(writer: MemoryWriter, act: ActionEvent, *kinds: str) -> None:
    """Ledger records of `act`, as a crashed runner or the reconciler left them."""
    for n, kind in enumerate(kinds, 1):
        match kind:
            case "proposed":
                record: AvroModel = rec.proposed(writer, act, 30.0)
            case "started":
                record = rec.started(writer, act, kinds[:n].count("started"))
            case "confirmed":
                record = rec.confirmed(writer, act, ToolResult("{}", "rcpt-x"), origin="lookup")
            case "unknown":
                record = rec.unknown(writer, act, "?", "e")
            case _:
                record = rec.resolved(writer, act, "retry", "human:t", "")
        writer.commit(lambda r=record: [r])  # type: ignore[misc]


def observations(writer: MemoryWriter) -> list[ObservationEvent]:
    return writer.written(ObservationEvent)


def test_settle_confirms_what_the_lookup_finds_without_calling_again(
    writer: MemoryWriter, tool: FakeTool
) -> None:
    act = action(writer, tool)
    ledger(writer, act, "proposed", "started")
    tool._done.add(act.operation_id)  # the call happened before the crash
    assert protocol(writer, tool).settle(act, "crashed") is Outcome.DONE
    (obs,) = observations(writer)
    (confirmed,) = writer.written(EffectConfirmed)
    assert obs.backfilled and obs.content == "found it" and obs.provider_receipt == f"rcpt-{act.operation_id}"
    assert confirmed.origin == "lookup" and writer.records[-2:] == [obs, confirmed]  # one write
    # The reconciler's id for this transition: readers keep one if it learns the same at once.
    assert confirmed.id == transition_id(act.operation_id, "confirmed")
    assert tool.calls(act.operation_id) == 0 and writer.state.ledger[act.operation_id].status == "confirmed"


def test_settle_retries_with_the_same_key_what_provably_did_not_happen(
    writer: MemoryWriter, tool: FakeTool
) -> None:
    act = action(writer, tool)
    ledger(writer, act, "proposed", "started")
    assert protocol(writer, tool).settle(act, "crashed") is Outcome.DONE
    assert [s.attempt for s in writer.written(EffectStarted)] == [1, 2]
    assert tool.calls(act.operation_id) == 1 and not observations(writer)[0].backfilled


def test_settle_never_reruns_an_irreversible_call_nobody_can_look_up(
    writer: MemoryWriter, blind: NoLookupTool
) -> None:
    act = action(writer, blind)
    ledger(writer, act, "proposed", "started")
    effects = protocol(writer, blind)
    assert effects.settle(act, "crashed") is Outcome.HUMAN
    assert effects.settle(act, "crashed again") is Outcome.HUMAN
    (unknown,) = writer.written(EffectUnknown)  # recorded once
    assert "no lookup" in unknown.evidence and blind.calls(act.operation_id) == 0


def test_settle_gives_up_after_max_attempts(writer: MemoryWriter, tool: FakeTool) -> None:
    act = action(writer, tool)
    ledger(writer, act, "proposed", *["started"] * MAX_ATTEMPTS)
    assert protocol(writer, tool).settle(act, "crashed") is Outcome.HUMAN
    assert f"gave up after {MAX_ATTEMPTS} attempts" in writer.written(EffectUnknown)[0].evidence
    assert tool.calls(act.operation_id) == 0


def test_a_failed_lookup_retries_only_what_a_retry_cannot_duplicate(
    writer: MemoryWriter, tool: FakeTool, blind: NoLookupTool
) -> None:
    act = action(writer, tool)
    ledger(writer, act, "proposed", "started")
    tool._lookup_down = True
    assert protocol(writer, tool).settle(act, "crashed") is Outcome.DONE  # keyed: the key dedupes
    assert tool.calls(act.operation_id) == 1
    other = MemoryWriter()
    irreversible = action(other, blind)
    ledger(other, irreversible, "proposed", "started")
    assert protocol(other, blind).settle(irreversible, "crashed") is Outcome.HUMAN


def test_a_dropped_answer_is_settled_at_once_by_lookup(writer: MemoryWriter, tool: FakeTool) -> None:
    act = action(writer, tool)
    ledger(writer, act, "proposed")
    tool._drop_answers = 1
    assert protocol(writer, tool).run_action(act) is Outcome.DONE
    assert tool.calls(act.operation_id) == 1 and observations(writer)[0].backfilled


def recovery(writer: MemoryWriter, *tools: Tool) -> Recovery:
    return Recovery(writer, protocol(writer, *tools))


def test_recovery_backfills_a_known_outcome_and_continues_the_run(
    writer: MemoryWriter, tool: FakeTool
) -> None:
    act = action(writer, tool)
    ledger(writer, act, "proposed", "started", "confirmed")
    assert recovery(writer, tool).resume() is None  # the run goes on
    (obs,) = observations(writer)
    assert obs.backfilled and obs.action_id == act.id and tool.calls(act.operation_id) == 0
    assert not writer.written(EffectConfirmed)[1:]  # the outcome was already on the ledger


def test_recovery_executes_what_never_started(writer: MemoryWriter, tool: FakeTool) -> None:
    act = action(writer, tool)
    ledger(writer, act, "proposed")
    assert recovery(writer, tool).resume() is None
    assert tool.calls(act.operation_id) == 1 and len(writer.written(EffectProposed)) == 1
    assert writer.state.ledger[act.operation_id].status == "confirmed"


def test_recovery_proposes_an_action_the_ledger_never_saw_before_running_it(
    writer: MemoryWriter, tool: FakeTool
) -> None:
    act = action(writer, tool)
    assert recovery(writer, tool).resume() is None
    kinds = [type(r).__name__ for r in writer.records if not isinstance(r, EventEnvelope)]
    assert kinds == ["EffectProposed", "EffectStarted", "EffectConfirmed"]
    assert tool.calls(act.operation_id) == 1


def test_recovery_leaves_an_unknown_to_a_human(writer: MemoryWriter, blind: NoLookupTool) -> None:
    act = action(writer, blind)
    ledger(writer, act, "proposed", "started", "unknown")
    assert recovery(writer, blind).resume() == "waiting_for_human"
    assert writer.state.status == "waiting_for_human" and writer.snapshots == 1
    assert blind.calls(act.operation_id) == 0 and len(writer.written(EffectUnknown)) == 1


def test_recovery_runs_again_what_a_human_approved(writer: MemoryWriter, blind: NoLookupTool) -> None:
    act = action(writer, blind, status="waiting_for_human")
    ledger(writer, act, "proposed", "started", "unknown", "retry")
    assert recovery(writer, blind).resume() is None
    assert blind.calls(act.operation_id) == 1 and [s.attempt for s in writer.written(EffectStarted)] == [1, 2]
    assert len(writer.written(EffectResolved)) == 1


def test_recovery_turns_a_receipt_into_the_outcome_and_its_observation(
    writer: MemoryWriter, tool: FakeTool
) -> None:
    act = action(writer, tool)
    ledger(writer, act, "proposed", "started")
    receipt = Receipt(
        id="r", provider="fake", operation_id=act.operation_id, conversation_id=CID, tenant_id="t",
        provider_receipt="rcpt-9", status="succeeded", result='{"id": 9}', timestamp=datetime.now(UTC),
    )  # fmt: skip
    writer.state = fold(writer.state, receipt)
    assert recovery(writer, tool).resume() is None
    (obs,) = observations(writer)
    (confirmed,) = writer.written(EffectConfirmed)
    assert (obs.content, obs.provider_receipt, confirmed.origin) == ('{"id": 9}', "rcpt-9", "receipt")
    assert tool.calls(act.operation_id) == 0


def test_recovery_waits_for_the_users_confirmation(writer: MemoryWriter, tool: FakeTool) -> None:
    act = action(writer, tool, status="waiting_for_confirmation")
    assert recovery(writer, tool).resume() == "waiting_for_confirmation"
    assert tool.calls(act.operation_id) == 0 and not writer.written(EffectProposed)


def test_recovery_heals_an_observed_operation_left_open(writer: MemoryWriter, tool: FakeTool) -> None:
    act = action(writer, tool)
    ledger(writer, act, "proposed", "started")
    writer.commit(lambda: [rec.observation(writer, act, ToolResult("done", "rcpt-1"))])
    assert recovery(writer, tool).resume() is None
    (confirmed,) = writer.written(EffectConfirmed)
    assert confirmed.provider_receipt == "rcpt-1" and tool.calls(act.operation_id) == 0


def run_loop(writer: MemoryWriter, tool: Tool) -> RunLoop:
    services = Services(
        Agent(tools=(tool,)), DirectScriptedClient(), RuntimeSettings(), SecretsRegistry(), NO_CRASH
    )
    return RunLoop(writer, services, EffectProtocol(writer, services, RunStats()), RunStats())


@pytest.mark.parametrize("results", [["a", "b", "c"], ["same", "same", "same"]])
def test_stuck_means_the_same_call_and_the_same_result_wherever_the_result_lands(
    writer: MemoryWriter, tool: FakeTool, results: list[str]
) -> None:
    """Each step's observations are found by `action_id`: here user messages come between the
    action and its observation, and more of them after it than the step wrote itself."""
    loop = run_loop(writer, tool)

    def notes(count: int) -> list[AvroModel]:
        return [writer.new(MessageEvent, source="user", role="user", content="note") for _ in range(count)]

    for result in results:
        act = action(writer, tool)
        writer.commit(lambda: notes(3))
        writer.commit(lambda r=result, a=act: [rec.observation(writer, a, ToolResult(r))])  # type: ignore[misc]
        writer.commit(lambda: notes(8))
        loop.recent_steps.append(loop._signature([act]))
    stop = loop.stop_reason()
    assert (stop is not None and stop[0] == "stuck") == (len(set(results)) == 1)
