"""Bounded takeover: a partition's quiet conversations are restored when first needed.

A takeover reads the partition once (snapshots, then the uncovered tails: `restore_partition`).
Folding every conversation of it into a live `Conversation` (decoding its view, loading its
agent) is what grows with conversations per partition, so it is not all done before the
partition serves: only the conversations that may have work are restored at once (a tail after
their snapshot, a run under way, an unanswered user message: `is_quiet`); the quiet rest stay
`pending`, each restored by its first lookup (its inbox record, a fork of it) or by the runner
between runs, a few milliseconds at a time (`FleetRunner._restore_slice`).

A quiet conversation's snapshot covers its whole log, so no restore offset of the partition
depends on it while it is pending: the snapshots written meanwhile are the same as after an
eager restore.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from convdb.producers.conversation import Conversation
from convdb.schemas import Codec, MessageEvent, Snapshot
from convdb.schemas.errors import SchemaError
from convdb.schemas.topics import EVENTS

SETTLED = frozenset({"waiting_for_confirmation", "waiting_for_human"})
"""Statuses in which a conversation waits for a person, never for the runner (`needs_takeover`)."""


def is_quiet(snapshot: Snapshot | None, codec: Codec, has_tail: bool) -> bool:
    """True when a conversation restored from this snapshot alone needs no takeover.

    Quiet: its snapshot holds its view and nothing of it was written after (no tail), it was not
    running, and its active leaf is no user message waiting for an answer (the two cases
    `needs_takeover` resumes). Anything in doubt (an undecodable leaf) is not quiet.
    """
    if snapshot is None or has_tail or not snapshot.view_complete:
        return False
    if snapshot.execution_status == "running":
        return False
    if snapshot.execution_status in SETTLED or snapshot.active_leaf_id is None:
        return True
    leaf = _leaf(snapshot, codec)
    return leaf is not None and not (isinstance(leaf, MessageEvent) and leaf.role == "user")


def _leaf(snapshot: Snapshot, codec: Codec) -> Any:
    """The snapshot's active leaf event, decoded from the end of its path (where a leaf is)."""
    for data in (*reversed(snapshot.path_events), *reversed(snapshot.view_events)):
        try:
            event = codec.decode(data, expect=EVENTS.value_types)
        except SchemaError:
            return None
        if event.id == snapshot.active_leaf_id:
            return event
    return None


class Conversations(dict[str, Conversation]):
    """A partition's conversations by id: the restored ones, plus the quiet ones not restored yet
    (`pending`), each restored by its first `get` or `[]` (so a lookup never misses a conversation
    that exists, and never creates a second one). Iterating yields the restored ones only: a
    pending conversation has no run due, no deadline and no uncovered record."""

    def __init__(self, restore: Callable[[str], object]) -> None:
        super().__init__()
        self.pending: dict[str, Snapshot] = {}
        """Quiet conversations not restored yet, with the snapshot they restore from."""
        self._restore = restore

    def __contains__(self, cid: object) -> bool:
        return dict.__contains__(self, cid) or cid in self.pending

    def __getitem__(self, cid: str) -> Conversation:
        if cid in self.pending:
            self._restore(cid)
        return dict.__getitem__(self, cid)

    def get(self, cid: str, default: Conversation | None = None) -> Conversation | None:  # type: ignore[override]
        """The conversation (restored now if it was pending), else `default`."""
        if cid in self.pending:
            self._restore(cid)
        return dict.get(self, cid, default)

    def clear(self) -> None:
        """Forget every conversation, restored or pending."""
        self.pending.clear()
        dict.clear(self)
