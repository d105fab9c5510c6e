"""What an inbox record asks of its conversation (the fleet's version of `InboxRunner.apply`)."""

from __future__ import annotations

import logging

from producers.crashpoints import CrashPoints
from producers.fleet.conversation import FleetConversation
from schemas import InboxMessage

logger = logging.getLogger(__name__)


def apply(conv: FleetConversation, inbox: InboxMessage, crash: CrashPoints) -> None:
    """Do what the inbox record asks; runs the conversation until it stops."""
    match inbox.command:
        case "message":
            appended = conv.send_message(inbox.content, event_id=inbox.id)
            crash.hit("after_inbox_message")
            if appended or conv.status in ("idle", "running"):
                conv.run()
            elif conv.unobserved_actions():
                conv.resume()
        case "pause":
            conv.request_pause()
            if conv.status != "running":
                conv.snapshot()
        case "resume":
            if conv.status == "waiting_for_confirmation":
                conv.confirm(True)
            elif conv.unobserved_actions():
                conv.resume()
            else:
                conv.run()
        case "resolve":
            _resolve(conv, inbox)


def _resolve(conv: FleetConversation, inbox: InboxMessage) -> None:
    decision = inbox.content if inbox.content in ("confirmed", "failed", "retry") else None
    if inbox.operation_id is None or decision is None:
        logger.error("inbox %s: resolve needs operation_id and content confirmed|failed|retry", inbox.id)
        return
    if inbox.operation_id not in {a.operation_id for a in conv.unobserved_actions()}:
        logger.info("inbox %s: operation %s is already settled", inbox.id, inbox.operation_id)
        return
    conv.resolve(inbox.operation_id, decision, inbox.sender, note=f"resolved via inbox {inbox.id}")  # type: ignore[arg-type]
