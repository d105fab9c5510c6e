"""The execution status machine: allowed transitions written as data, and the change recorded.

The status is never assigned: `set_status` records a StateUpdateEvent and the conversation's
state folds it (`convdb.producers.state`).
"""

from __future__ import annotations

from convdb.producers.errors import IllegalTransitionError
from convdb.producers.writer import ConversationWriter
from convdb.schemas import AvroModel, StateUpdateEvent
from convdb.schemas._types import ExecutionStatus

_RESTARTABLE = frozenset({"running", "idle", "paused"})

TRANSITIONS: dict[str, frozenset[str]] = {
    "idle": frozenset({"running", "paused"}),
    "running": frozenset(
        {"idle", "paused", "waiting_for_confirmation", "waiting_for_human", "finished", "error", "stuck"}
    ),
    "paused": frozenset({"running", "idle"}),
    "waiting_for_confirmation": frozenset({"running", "paused", "idle"}),
    # Only a human's resolution (which sets running) gets a conversation out of this one.
    "waiting_for_human": frozenset({"running", "paused"}),
    # Terminal for a run, not for the conversation: a new user message starts another run.
    "finished": _RESTARTABLE,
    "error": _RESTARTABLE,
    "stuck": _RESTARTABLE,
}
"""status -> statuses it may move to."""

STOP_STATUSES = frozenset(
    {"paused", "waiting_for_confirmation", "waiting_for_human", "finished", "error", "stuck", "idle"}
)
"""Statuses in which `run()` has returned."""


def check_transition(conversation_id: str, current: ExecutionStatus, new: ExecutionStatus) -> None:
    """Raise `IllegalTransitionError` unless current -> new is allowed."""
    if new not in TRANSITIONS[current]:
        allowed = ", ".join(sorted(TRANSITIONS[current]))
        raise IllegalTransitionError(
            f"conversation {conversation_id}: cannot go from {current} to {new} (allowed: {allowed})"
        )


def set_status(writer: ConversationWriter, status: ExecutionStatus, reason: str = "") -> None:
    """Record a status change (a no-op when unchanged); raises `IllegalTransitionError` first."""
    current = writer.state.status
    if status == current:
        return
    check_transition(writer.conversation_id, current, status)

    def build() -> list[AvroModel]:
        update = writer.new(StateUpdateEvent, source="environment", execution_status=status, reason=reason)
        # A delegated child's end and its report to the parent are one write: neither without the other.
        return [update, *writer.end_reports(status, reason, update.seq)]

    writer.commit(build)
