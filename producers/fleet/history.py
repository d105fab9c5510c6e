"""Branch and fork commands: checked against the log by the conversation's single writer.

A branch moves a conversation's active leaf back to an earlier event (an `ActiveLeafChangedEvent`
in its own log), so the next event starts a new branch there. A fork starts a new conversation
that continues after an event of another one: its first event is a `ForkEvent`, and its agent
reads the source's path up to that event before its own events. The fork command is keyed by the
new conversation, so the runner that owns the new conversation's partition (its single, fenced
writer) writes it; the source is only read (from this partition, or another one's snapshots).

Every refusal raises a data error before anything is written, and the runner dead-letters the
record with it: an unknown seq, a seq beyond the log, a branch switch as the target, a fork target
that already exists, a source that does not, another tenant's source, an operation still open. A
LangGraph graph's thread adds its own checks (`GraphConversation.admit_branch` / `admit_fork`).
"""

from __future__ import annotations

from convdb.producers.conversation import Conversation
from convdb.producers.errors import HistoryCommandError
from convdb.producers.fleet.owner import PartitionOwner
from convdb.projections.errors import TenantMismatchError, UnknownEventError
from convdb.projections.view import ViewState, node_at_seq, path_to_root
from convdb.schemas import Event, InboxMessage
from convdb.schemas.validation import shown


def admit_command(owner: PartitionOwner, record: InboxMessage) -> Conversation:
    """The conversation a branch or fork command acts on, once the command is checked.

    For a fork that is the new conversation, created here with the source's path as its prefix
    (nothing is written yet: `apply_inbox` writes its `ForkEvent`).

    Raises:
        HistoryCommandError, TenantMismatchError, RecordRefusedError: the command is refused.
    """
    if record.command == "fork":
        target = _fork_target(owner, record)
        check_fork = getattr(target, "admit_fork", None)  # a LangGraph graph's thread (graph_host)
        if check_fork is not None:
            try:
                check_fork(record)
            except HistoryCommandError:
                del owner.conversations[target.conversation_id]  # nothing was written
                raise
        return target
    if record.conversation_id not in owner.conversations:
        raise HistoryCommandError(f"branch of {shown(record.conversation_id)}: no such conversation")
    conv = owner.admit(record)
    event = _event_at(conv.state.view, record, "branch")
    check_branch = getattr(conv, "admit_branch", None)  # a graph's: its own rules (graph_host)
    if check_branch is not None:
        check_branch(event)
        return conv
    open_operations = [a.operation_id for a in conv.unobserved_actions()]
    if open_operations:
        raise HistoryCommandError(
            f"branch of {conv.conversation_id}: {len(open_operations)} action(s) wait for an outcome or a "
            f"confirmation ({shown(open_operations[0])}): decide them first"
        )
    return conv


def _fork_target(owner: PartitionOwner, record: InboxMessage) -> Conversation:
    """The new conversation of a fork, with the source's path up to the fork point as its prefix."""
    cid, source_id = record.conversation_id, record.source_conversation_id
    if cid in owner.conversations or cid in owner.unavailable:
        raise HistoryCommandError(f"fork into {shown(cid)}: that conversation already exists")
    if source_id is None:
        raise HistoryCommandError(f"fork into {shown(cid)}: no source_conversation_id")
    if source_id == cid:
        raise HistoryCommandError(f"fork into {shown(cid)}: a conversation cannot be forked into itself")
    found = owner.read_source(source_id)
    if found is None:
        raise HistoryCommandError(f"fork of {shown(source_id)}: no such conversation")
    view, source_prefix = found
    if view.tenant_id != record.tenant_id:
        raise TenantMismatchError(
            f"fork of {shown(source_id)} by tenant {shown(record.tenant_id)}: the source belongs to "
            "another tenant"
        )
    point = _event_at(view, record, "fork")
    prefix = (*source_prefix, *path_to_root(view, point.id))
    return owner.create(cid, record.tenant_id, prefix=prefix)


def _event_at(view: ViewState, record: InboxMessage, what: str) -> Event:
    """The tree node at the command's `at_seq`; HistoryCommandError when there is none."""
    if record.at_seq is None:
        raise HistoryCommandError(f"{what} of {view.conversation_id}: no at_seq")
    try:
        return node_at_seq(view, record.at_seq)
    except UnknownEventError as exc:
        raise HistoryCommandError(f"{what}: {exc}") from exc
