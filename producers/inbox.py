"""What an inbox record does to its conversation (DESIGN §6, Inbox).

The fleet runner commits the record's offset in the transaction of the first write it causes
(the MessageEvent of a message), so a crash anywhere redelivers the record, or finds its effect
already in the log: every branch here is safe on a redelivery. A message's event id is the
inbox record's id, so a redelivered message is recognised, not appended twice.
"""

from __future__ import annotations

import logging

from convdb.producers.conversation import Conversation
from convdb.producers.crashpoints import CrashPoints
from convdb.producers.delegation import ended_by_cancel, link_from_inbox
from convdb.projections.view import active_branch, node_at_seq
from convdb.schemas import InboxMessage, MessageEvent
from convdb.schemas._types import Resolution

logger = logging.getLogger(__name__)


def apply_inbox(conv: Conversation, inbox: InboxMessage, crash: CrashPoints) -> None:
    """Do what an inbox record asks of its conversation; runs it until it stops."""
    match inbox.command:
        case "message":
            link = link_from_inbox(inbox)
            if link is not None and conv.state.view.last_seq == 0:
                conv.effects.delegations.pending_link = link  # its system prompt records it
            appended = conv.send_message(inbox.content, event_id=inbox.id)
            crash.hit("after_inbox_message")
            # Not appended: a redelivery after a crash. Run unless something already answered it.
            if appended or conv.status in ("idle", "running") or conv.unanswered(inbox.id):
                conv.run()
            elif conv.unobserved_actions():
                conv.resume()
        case "pause":
            conv.request_pause()
            # A parent waiting for children pauses them too (and they their own): the whole subtree.
            conv.effects.delegations.propagate("pause", inbox.id)
            if conv.status != "running":
                conv.snapshot()
        case "cancel":
            # The whole subtree: every child still working is cancelled too, and reports `cancelled`.
            delegations = conv.effects.delegations
            if not conv.cancel(inbox.sender, also=lambda: delegations.propagation("cancel", inbox.id)):
                delegations.propagate("cancel", inbox.id)  # its run had ended; children may still work
        case "resume" if inbox.child_conversation_id is not None:
            # A child's report: recorded once; the parent runs on when its wait condition holds,
            # unless it was cancelled meanwhile and nobody wrote since (the observation is written,
            # the run stays ended; a user message sent after the cancel is answered).
            if conv.effects.delegations.receive(inbox) is not None and not ended_by_cancel(
                active_branch(conv.state.view)
            ):
                conv.run()
        case "resume":
            conv.loop.pause_requested.clear()  # a pause not taken yet (a parent waiting) is called off
            conv.effects.delegations.propagate("resume", inbox.id)
            if inbox.sender.startswith("conversation:") and conv.status not in ("paused", "running"):
                # A parent's resume never approves its child's actions (a user does), nor restarts
                # a child whose run ended meanwhile (a cancel, whose report is on its way up).
                return
            if conv.status == "waiting_for_confirmation":
                conv.confirm(True)
            elif conv.unobserved_actions():
                conv.resume()
            else:
                conv.run()
        case "resolve":
            _resolve(conv, inbox)
        case "branch":
            _branch(conv, inbox)
        case "fork":
            _fork(conv, inbox)


def _branch(conv: Conversation, inbox: InboxMessage) -> None:
    """Switch the active leaf to the event at `at_seq` (checked by the runner before).

    Branching at a user message answers it again on the new branch, as a takeover would (an
    unanswered user message at the leaf is run); anywhere else the branch waits for a message.
    """
    if inbox.at_seq is None:
        return
    target = node_at_seq(conv.state.view, inbox.at_seq)
    conv.switch_leaf(target.id)
    if isinstance(target, MessageEvent) and target.role == "user":
        conv.run()
    else:
        conv.snapshot()


def _fork(conv: Conversation, inbox: InboxMessage) -> None:
    """Write the new conversation's ForkEvent after the last event of its prefix (the source's
    path up to `at_seq`, set when the runner created it); it waits for a message."""
    if inbox.source_conversation_id is None or not conv.loop.prefix or conv.state.view.last_seq:
        return
    conv.begin_fork(inbox.source_conversation_id, conv.loop.prefix[-1].id)
    conv.snapshot()


def _resolve(conv: Conversation, inbox: InboxMessage) -> None:
    decisions: dict[str, Resolution] = {"confirmed": "confirmed", "failed": "failed", "retry": "retry"}
    decision = decisions.get(inbox.content)
    if inbox.operation_id is None or decision is None:
        logger.error("inbox %s: resolve needs operation_id and content confirmed|failed|retry", inbox.id)
        return
    if inbox.operation_id not in {a.operation_id for a in conv.unobserved_actions()} or (
        inbox.operation_id not in conv.ledger
    ):
        # A takeover's resume already applied the decision the API put on the ledger (or a
        # redelivery): nothing is left open to resolve. Or the action awaits confirmation.
        logger.info("inbox %s: operation %s is already settled", inbox.id, inbox.operation_id)
        return
    conv.resolve(inbox.operation_id, decision, inbox.sender, note=f"resolved via inbox {inbox.id}")
