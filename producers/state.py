"""A conversation's state, folded from its own records: view, execution status, ledger, cost.

Nothing here is assigned: the status is the last StateUpdateEvent's, the ledger is the operation
machine over the ledger records, the cost is the sum of the LLMUsageEvents. A live conversation
folds each record once it is durable; a restore folds a snapshot's base and the tail after it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import cast

from convdb.producers.ledger import EMPTY, Ledger, fold_ledger
from convdb.projections import view
from convdb.projections.view import ViewState
from convdb.schemas import (
    ActionEvent,
    AvroModel,
    Event,
    EventEnvelope,
    LedgerRecord,
    LLMUsageEvent,
    ObservationEvent,
    Receipt,
    StateUpdateEvent,
    UserRejectEvent,
)
from convdb.schemas._types import ExecutionStatus


@dataclass(frozen=True, slots=True)
class ConversationState:
    """Everything a conversation knows about itself (immutable; replaced on every fold)."""

    view: ViewState
    status: ExecutionStatus = "idle"
    ledger: Ledger = EMPTY
    cost: float = 0.0
    """LLM cost (USD) of every event folded (a restore starts from its snapshot's total)."""


def initial(conversation_id: str) -> ConversationState:
    """The state of a conversation with no record yet."""
    return ConversationState(view.initial(conversation_id))


def unobserved_actions(state: ViewState) -> list[ActionEvent]:
    """Actions on the active branch with no observation or rejection yet, in log order."""
    path = view.path_to_root(state, state.active_leaf) if state.active_leaf else ()
    answered = {e.action_id for e in path if isinstance(e, ObservationEvent | UserRejectEvent)}
    return [e for e in path if isinstance(e, ActionEvent) and e.id not in answered]


def fold(state: ConversationState, record: AvroModel) -> ConversationState:
    """Fold one of the conversation's records (event, ledger record, receipt; snapshots change nothing).

    Raises:
        ProjectionError: an event the view refuses (a seq gap, an unknown parent).
    """
    if isinstance(record, EventEnvelope):
        event = cast(Event, record)
        status = record.execution_status if isinstance(record, StateUpdateEvent) else state.status
        cost = state.cost + (record.cost or 0.0) if isinstance(record, LLMUsageEvent) else state.cost
        return ConversationState(view.fold(state.view, event), status, state.ledger, cost)
    if isinstance(record, LedgerRecord | Receipt):
        return replace(state, ledger=fold_ledger(state.ledger, record))
    return state
