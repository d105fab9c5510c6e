"""Dependencies every router shares: the API context (settings, store, codec), tenant auth."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request
from sqlalchemy.engine import Connection, Engine

from infra.producer import Delivery, DurableProducer
from infra.settings import Settings
from schemas import AvroModel, Codec
from schemas.topics import Topic


@dataclass
class ApiContext:
    """What the routers need; built once by `create_app` and kept on `app.state.ctx`."""

    settings: Settings
    engine: Engine
    codec: Codec
    _producer: DurableProducer | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def publish(self, records: Sequence[tuple[Topic, AvroModel]]) -> list[Delivery]:
        """Publish records keyed by conversation, one after the other, each durable before the next.

        Raises:
            PublishError: not acknowledged in time (the app answers 503).
        """
        with self._lock:
            if self._producer is None:
                self._producer = DurableProducer(self.settings)
        producer, ns = self._producer, self.settings.namespace
        # `send` waits for each ack on its own: request threads share the producer.
        return [producer.send(t.name(ns), r.conversation_id, self.codec.encode(r)) for t, r in records]

    def close(self) -> None:
        """Release the producer (flushing it) and the store."""
        if self._producer is not None:
            self._producer.close()
        self.engine.dispose()


def context(request: Request) -> ApiContext:
    """The app's context."""
    ctx: ApiContext = request.app.state.ctx
    return ctx


def tenant(
    request: Request,
    x_api_key: Annotated[str | None, Header(description="API key; it decides the tenant you see.")] = None,
) -> str:
    """The tenant of the request's `X-API-Key`; 401 when it is missing or unknown."""
    if not x_api_key:
        raise HTTPException(401, "missing X-API-Key header", headers={"WWW-Authenticate": "ApiKey"})
    found = context(request).settings.api.keys.get(x_api_key)
    if found is None:
        raise HTTPException(401, "unknown API key", headers={"WWW-Authenticate": "ApiKey"})
    return found


def connection(request: Request) -> Iterator[Connection]:
    """A read connection to the store for one request."""
    with context(request).engine.connect() as conn:
        yield conn


Tenant = Annotated[str, Depends(tenant)]
"""The authenticated tenant id."""

Conn = Annotated[Connection, Depends(connection)]
"""A store connection."""

Ctx = Annotated[ApiContext, Depends(context)]
"""The API context."""
