"""The execution status machine: allowed transitions written as data, and the change recorded.

The status is never assigned: `set_status` records a StateUpdateEvent and the conversation's
state folds it (`convdb.producers.state`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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
    # A cancel ends a run in `error` (reason `cancelled`) from any status a run can stop in.
    "paused": frozenset({"running", "idle", "error"}),
    "waiting_for_confirmation": frozenset({"running", "paused", "idle", "error"}),
    # Only a human's resolution (which sets running) or a cancel gets a conversation out of this one.
    "waiting_for_human": frozenset({"running", "paused", "error"}),
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

CANCELLED = "cancelled"
"""How the reason of a cancelled run begins (its status is `error`, as a spent budget's is)."""

CANCELLABLE = frozenset({"running", "paused", "waiting_for_confirmation", "waiting_for_human"})
"""Statuses a cancel ends (a run under way or stopped part-way); in any other one it has nothing to end."""


def check_transition(conversation_id: str, current: ExecutionStatus, new: ExecutionStatus) -> None:
    """Raise `IllegalTransitionError` unless current -> new is allowed."""
    if new not in TRANSITIONS[current]:
        allowed = ", ".join(sorted(TRANSITIONS[current]))
        raise IllegalTransitionError(
            f"conversation {conversation_id}: cannot go from {current} to {new} (allowed: {allowed})"
        )


def set_status(
    writer: ConversationWriter,
    status: ExecutionStatus,
    reason: str = "",
    *,
    before: Callable[[], Sequence[AvroModel]] | None = None,
) -> None:
    """Record a status change (a no-op when unchanged); raises `IllegalTransitionError` first.

    `before`: records that must be durable with the change, never without it (a cancel's
    rejections and the cancels it sends down its task tree), built first in the same write.
    """
    current = writer.state.status
    if status == current:
        return
    check_transition(writer.conversation_id, current, status)

    def build() -> list[AvroModel]:
        first = list(before()) if before is not None else []
        update = writer.new(StateUpdateEvent, source="environment", execution_status=status, reason=reason)
        # A delegated child's end and its report to the parent are one write: neither without the other.
        return [*first, update, *writer.end_reports(status, reason, update.seq)]

    writer.commit(build)
