"""The inbox loop: consume messages sent to conversations, append them in order, run.

The inbox offset is committed only after the message's MessageEvent is durable *and* the
run it started has stopped, so a crash anywhere redelivers the message: its event id is the
inbox record id, so the redelivery is recognised (not appended twice) and the conversation is
resumed from the log instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from infra.kafka import make_consumer
from infra.settings import Settings
from producers.conversation import Conversation
from producers.crashpoints import CrashPoints
from producers.publisher import EventPublisher
from producers.runtime import Runtime
from schemas import InboxMessage
from schemas.errors import SchemaError
from schemas.topics import DLQ, INBOX

logger = logging.getLogger(__name__)


class InboxRunner:
    """One consumer-group member over the inbox topic that runs the conversations it receives."""

    def __init__(self, runtime: Runtime, publisher: EventPublisher, group: str = "runner") -> None:
        self.runtime = runtime
        self.settings: Settings = runtime.settings
        self.publisher = publisher
        self.consumer: Consumer = make_consumer(self.settings, self.settings.group(group))
        self.conversations: dict[str, Conversation] = {}
        self.handled = 0
        self.poisoned = 0

    def serve(self, stop: Callable[[InboxRunner], bool], poll_timeout: float = 0.2) -> None:
        """Handle inbox records until `stop(self)` is true (checked between polls)."""
        self.consumer.subscribe([INBOX.name(self.settings.namespace)])
        try:
            while not stop(self):
                msg = self.consumer.poll(poll_timeout)
                if msg is None:
                    continue
                if msg.error() is not None:
                    self._transport_error(msg)
                    continue
                self.handle(msg)
                self.consumer.commit(
                    offsets=[TopicPartition(msg.topic(), msg.partition(), msg.offset() + 1)],
                    asynchronous=False,
                )
        finally:
            self.consumer.close()

    def _transport_error(self, msg: Message) -> None:
        err = msg.error()
        if err.code() == KafkaError._PARTITION_EOF or err.retriable():
            return
        logger.error("inbox consumer error: %s", err.str())
        time.sleep(0.1)

    def handle(self, msg: Message) -> None:
        """Apply one inbox record to its conversation and run it until it stops."""
        try:
            inbox: InboxMessage = self.runtime.codec.decode(msg.value(), expect=(InboxMessage,))
        except SchemaError as exc:
            self._dead_letter(msg, exc)
            return
        conv = self._conversation(inbox)
        conv.inbox_offset = msg.offset() + 1
        self.apply(conv, inbox)
        self.handled += 1

    def apply(self, conv: Conversation, inbox: InboxMessage) -> None:
        """Do what the inbox record asks."""
        apply_inbox(conv, inbox, self.runtime.crash)

    def _conversation(self, inbox: InboxMessage) -> Conversation:
        conv = self.conversations.get(inbox.conversation_id)
        if conv is None:
            conv = self.runtime.load(inbox.conversation_id, inbox.tenant_id)
            if conv.unobserved_actions() and conv.status not in ("waiting_for_confirmation",):
                conv.resume()  # a crash interrupted it: finish that before new input
            self.conversations[inbox.conversation_id] = conv
        return conv

    def _dead_letter(self, msg: Message, exc: SchemaError) -> None:
        self.poisoned += 1
        logger.error(
            "%s[%d]@%d: poison inbox record to the DLQ: %s", msg.topic(), msg.partition(), msg.offset(), exc
        )
        headers = [
            ("convdb.error", f"{type(exc).__name__}: {exc}".encode()),
            ("convdb.origin", f"{msg.topic()}[{msg.partition()}]@{msg.offset()}".encode()),
        ]
        key = (msg.key() or b"").decode(errors="replace")
        delivery = self.publisher.produce_raw(
            DLQ.name(self.settings.namespace), key, msg.value() or b"", headers
        )
        self.publisher.wait_durable([delivery])


def apply_inbox(conv: Conversation, inbox: InboxMessage, crash: CrashPoints) -> None:
    """Do what an inbox record asks of its conversation; runs it until it stops.

    Shared by the single-process `InboxRunner` and the fleet runner. Every branch is safe on a
    redelivery (the record's offset is committed only after it was handled).
    """
    match inbox.command:
        case "message":
            appended = conv.send_message(inbox.content, event_id=inbox.id)
            crash.hit("after_inbox_message")
            # Not appended: a redelivery after a crash. Run unless something already answered it.
            if appended or conv.status in ("idle", "running") or conv.unanswered(inbox.id):
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


def _resolve(conv: Conversation, inbox: InboxMessage) -> None:
    decision = inbox.content if inbox.content in ("confirmed", "failed", "retry") else None
    if inbox.operation_id is None or decision is None:
        logger.error("inbox %s: resolve needs operation_id and content confirmed|failed|retry", inbox.id)
        return
    if inbox.operation_id not in {a.operation_id for a in conv.unobserved_actions()}:
        # Resuming on load already applied the decision the API put on the ledger (or a
        # redelivery): nothing is left open to resolve.
        logger.info("inbox %s: operation %s is already settled", inbox.id, inbox.operation_id)
        return
    conv.resolve(inbox.operation_id, decision, inbox.sender, note=f"resolved via inbox {inbox.id}")  # type: ignore[arg-type]
