"""Post a user message to a conversation: an `InboxMessage` on the inbox topic, durable before 202."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from confluent_kafka import KafkaError, Message, Producer
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from consumers.api.deps import ApiContext, Conn, Ctx, Tenant
from consumers.views.tables import conversations as views_table
from infra.kafka import make_producer
from schemas import InboxMessage
from schemas.topics import INBOX

router = APIRouter(tags=["messages"])


class PostMessage(BaseModel):
    """A user message for a conversation."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, max_length=100_000, description="Message text.")
    sender: str = Field("user", min_length=1, max_length=200, description="Who sends it.")


class Accepted(BaseModel):
    """Where the message was stored: it is durable in the inbox topic."""

    id: str
    conversation_id: str
    topic: str
    partition: int
    offset: int


class _Inbox:
    """One shared producer; `send` blocks until the broker acknowledged (acks=all)."""

    def __init__(self, producer: Producer, topic: str, timeout: float) -> None:
        self.producer, self.topic, self.timeout = producer, topic, timeout
        self._lock = threading.Lock()

    def send(self, key: str, value: bytes) -> tuple[int, int]:
        result: dict[str, Any] = {}
        done = threading.Event()

        def delivered(err: KafkaError | None, msg: Message) -> None:
            result.update(err=err, partition=msg.partition(), offset=msg.offset())
            done.set()

        with self._lock:
            self.producer.produce(self.topic, value, key, on_delivery=delivered)
        deadline = datetime.now(UTC).timestamp() + self.timeout
        while not done.is_set() and datetime.now(UTC).timestamp() < deadline:
            with self._lock:
                self.producer.poll(0.05)
        if not done.is_set() or result.get("err") is not None:
            raise HTTPException(503, f"the inbox topic {self.topic} did not acknowledge: {result.get('err')}")
        return result["partition"], result["offset"]

    def close(self) -> None:
        self.producer.flush(self.timeout)


def _inbox(ctx: ApiContext) -> _Inbox:
    if "inbox" not in ctx.extras:
        topic = INBOX.name(ctx.settings.namespace)
        ctx.extras["inbox"] = _Inbox(
            make_producer(ctx.settings), topic, ctx.settings.kafka.delivery_timeout_s
        )
    return ctx.extras["inbox"]  # type: ignore[no-any-return]


@router.post(
    "/conversations/{conversation_id}/messages",
    status_code=202,
    response_model=Accepted,
    summary="Send a user message (durable in the inbox before 202)",
)
def post_message(
    conversation_id: str, body: PostMessage, tenant_id: Tenant, conn: Conn, ctx: Ctx
) -> Accepted:
    """Queue a message for a conversation (it may not have started yet); 404 if another tenant owns it."""
    owner = conn.execute(
        sa.select(views_table.c.tenant_id).where(views_table.c.conversation_id == conversation_id)
    ).scalar()
    if owner is not None and owner != tenant_id:
        raise HTTPException(404, f"no conversation {conversation_id!r}")
    message = InboxMessage(
        id=str(uuid.uuid4()),
        conversation_id=conversation_id,
        tenant_id=tenant_id,
        timestamp=datetime.now(UTC),
        command="message",
        content=body.content,
        sender=body.sender,
    )
    partition, offset = _inbox(ctx).send(conversation_id, ctx.codec.encode(message))
    return Accepted(
        id=message.id,
        conversation_id=conversation_id,
        topic=_inbox(ctx).topic,
        partition=partition,
        offset=offset,
    )
