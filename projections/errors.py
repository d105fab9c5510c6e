"""Errors raised by the projections package; all derive from `ConvdbError`."""

from __future__ import annotations

from convdb.schemas.errors import ConvdbError


class ProjectionError(ConvdbError):
    """Base of the errors a pure projection raises on input it cannot fold."""


class SequenceGapError(ProjectionError):
    """An event's seq does not follow its conversation's last seq (events missing, or out of order)."""


class SequenceConflictError(ProjectionError):
    """An event takes a seq its conversation already holds with another event id (a second writer,
    or a forgery): the log decided that seq with the first one, so this one is refused (DLQ)."""


class ConversationMismatchError(ProjectionError):
    """An event of one conversation was folded into another conversation's state."""


class UnknownEventError(ProjectionError):
    """An event refers to an event id (parent, new active leaf) that was never folded."""


class QueryError(ProjectionError):
    """A search query has a bad filter; the message names the filter and the fix."""


class CursorError(QueryError):
    """A pagination cursor is not one that `encode_cursor` made (garbled or tampered)."""


class IllegalTransitionError(ProjectionError):
    """A state machine (operation status, execution status) is asked for a transition it forbids."""


class TenantMismatchError(ProjectionError):
    """A record names another tenant than the one its conversation or operation belongs to; the
    first record fixed the owner (DESIGN §11), so this one is refused (DLQ)."""


class ForeignRecordError(ProjectionError):
    """A foreign system's record (an OpenHands event or state) is not one convdb can map; the
    message names the record (index, id, kind) and the field."""
