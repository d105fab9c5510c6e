"""Dependencies every router shares: the API context (settings, store, codec), tenant auth."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Header, HTTPException, Request
from sqlalchemy.engine import Connection, Engine

from convdb.consumers.api._slots import WriteSlots, act_for
from convdb.consumers.api.auth import AuthThrottle, client_address
from convdb.consumers.api.ownership import LogOwnership
from convdb.infra.errors import PublishError
from convdb.infra.producer import Delivery, DurableProducer
from convdb.infra.secrets import SecretsRegistry
from convdb.infra.settings import Settings
from convdb.schemas import AvroModel, Codec
from convdb.schemas.topics import Topic

T = TypeVar("T")


@dataclass
class ApiContext:
    """What the routers need; built once by `create_app` and kept on `app.state.ctx`."""

    settings: Settings
    engine: Engine
    codec: Codec
    _producer: DurableProducer | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    throttle: AuthThrottle = field(init=False)
    secrets: SecretsRegistry = field(default_factory=SecretsRegistry)
    """Redacts what the API accepts before it is written (registered values, detected credentials)."""
    _writers: ThreadPoolExecutor | None = field(default=None, repr=False)
    slots: WriteSlots = field(init=False)
    """The writer threads' slots, `publish_concurrency` in all, a share of them per tenant."""
    _ownership: LogOwnership | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        api = self.settings.api
        self.throttle = AuthThrottle(api.auth_failures, api.auth_window_s)
        self.slots = WriteSlots(
            api.publish_concurrency, api.tenant_write_share, "writes", "CONVDB_API__PUBLISH_CONCURRENCY"
        )

    def authenticate(self, request: Request, api_key: str | None, header: str = "X-API-Key") -> str:
        """The tenant of `api_key` (the request writes for it); 401 when missing or unknown.

        A valid key always authenticates; an unknown one is answered 429 instead of 401 once its
        address or its prefix failed too often (`AuthThrottle`).
        """
        if not api_key:
            raise HTTPException(401, f"missing {header} header", headers={"WWW-Authenticate": "ApiKey"})
        found = self.settings.api.keys.get(api_key)
        if found is None:
            self.throttle.failed(client_address(request), api_key)
            raise HTTPException(401, "unknown API key", headers={"WWW-Authenticate": "ApiKey"})
        act_for(found)
        return found

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

    async def publish_async(self, records: Sequence[tuple[Topic, AvroModel]]) -> list[Delivery]:
        """`publish` from the event loop: on the API's own bounded writer threads, with a timeout.

        While the broker is down, writes fail fast (503) instead of filling the threads that
        serve reads: at most `publish_concurrency` wait for the broker, each at most
        `publish_timeout_s`.

        Raises:
            PublishError: not acknowledged in time, or too many writes already waiting.
        """
        return await self.on_writer(self.publish, records)

    async def on_writer(self, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` on the bounded writer threads (broker calls), at most `publish_timeout_s`.

        Raises:
            WriteShareError: the request's tenant holds its share of the slots already (429).
            PublishError: it took too long, or too many broker calls are already waiting.
        """
        api = self.settings.api
        with self._lock:
            if self._writers is None:
                self._writers = ThreadPoolExecutor(api.publish_concurrency, thread_name_prefix="api-publish")
        holder = self.slots.take()
        loop = asyncio.get_running_loop()
        # In the request's context: the write continues the request's trace (and its log ids).
        context = contextvars.copy_context()
        future = loop.run_in_executor(self._writers, lambda: context.run(work, *args))
        # The slot is held until the work ends, even past the timeout: the thread is still busy.
        future.add_done_callback(lambda _done: self.slots.give(holder))
        try:
            return await asyncio.wait_for(asyncio.shield(future), api.publish_timeout_s)
        except TimeoutError as exc:
            raise PublishError(f"the broker did not answer within {api.publish_timeout_s:.0f}s") from exc

    @property
    def ownership(self) -> LogOwnership:
        """Who owns a conversation, from the read side and the log tails (built on first use)."""
        with self._lock:
            if self._ownership is None:
                self._ownership = LogOwnership(self.settings, self.engine, self.codec)
            return self._ownership

    def close(self) -> None:
        """Release the producer (flushing it), the writer threads and the store."""
        if self._writers is not None:
            self._writers.shutdown(wait=False, cancel_futures=True)
        if self._ownership is not None:
            self._ownership.close()
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
    """The tenant of the request's `X-API-Key`; 401 when it is missing or unknown (429: too many)."""
    return context(request).authenticate(request, x_api_key)


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
