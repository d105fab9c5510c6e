"""Errors raised by the producers package."""

from __future__ import annotations

# Defined once where they belong (the producer helpers, the pure folds); re-exported so that
# producers name every error it raises from here.
from convdb.infra.errors import FencedError as FencedError
from convdb.infra.errors import PublishError as PublishError
from convdb.projections.errors import IllegalTransitionError as IllegalTransitionError
from convdb.projections.errors import SequenceGapError as SequenceGapError
from convdb.schemas.errors import ConvdbError


class ToolArgumentError(ConvdbError):
    """The LLM called a tool with arguments that do not fit its parameters (or an unknown tool)."""


class EffectError(ConvdbError):
    """A tool's side effect did not go as planned; `retryable` says whether a retry may help."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class OutcomeUnknownError(EffectError):
    """The provider call may or may not have happened (connection dropped, timeout)."""


class LLMError(ConvdbError):
    """The LLM call failed (provider error, timeout, unusable reply)."""


class ConversationNotFoundError(ConvdbError):
    """No event of this conversation is on the events topic."""


class RecordRefusedError(ConvdbError):
    """An inbox record its conversation cannot take (another tenant's, an OpenHands payload for a
    conversation convdb runs, a user message for one that runs in OpenHands); it goes to the DLQ."""


class MisplacedRecordError(RecordRefusedError):
    """An inbox record keyed by another id than its conversation's, or on another partition than its
    key maps to (its conversation's runner is elsewhere: taking it would make a second writer)."""


class HistoryCommandError(RecordRefusedError):
    """A branch or fork command that cannot be carried out: no event at its seq (or a branch switch
    there), a fork target that already exists, a source that does not, or an operation still open."""


class RecordTooLargeError(RecordRefusedError):
    """What an inbox record makes (an event, a dead letter) is larger than the broker takes."""


class RecordFailedError(RecordRefusedError):
    """Handling an inbox record raised an error nobody foresaw; it goes to the DLQ with that error."""


class UnknownAgentError(RecordRefusedError):
    """An agent name that is neither installed (`convdb.agents` entry points) nor `module:attr`."""


class AgentLoadError(RecordRefusedError):
    """An agent's factory (or its module) raised, or returned something that is not an Agent."""


class DelegationRefusedError(RecordRefusedError):
    """A child's first record that cannot start its child: its id is taken by another conversation, or
    is not the one its parent's operation fixes."""


class AgentMismatchError(RecordRefusedError):
    """An inbox record naming another agent than the one its conversation runs."""
