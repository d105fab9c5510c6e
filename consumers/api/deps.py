"""Dependencies every router shares: the API context (settings, store, codec), tenant auth."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Header, HTTPException, Request
from sqlalchemy.engine import Connection, Engine

from consumers.api.ownership import LogOwnership
from infra.errors import PublishError
from infra.producer import Delivery, DurableProducer
from infra.secrets import SecretsRegistry
from infra.settings import Settings
from schemas import AvroModel, Codec
from schemas.topics import Topic

T = TypeVar("T")


class AuthThrottle:
    """Counts failed authentications per client address; too many in a window answer 429.

    Bounded memory: the least recently failing addresses are forgotten beyond `max_clients`.
    """

    def __init__(self, limit: int, window_s: float, max_clients: int = 10_000) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_clients = max_clients
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, client: str) -> None:
        """Raise HTTPException(429) while `client` is over its limit."""
        with self._lock:
            times = self._recent(client, time.monotonic())
            if times is not None and len(times) >= self.limit:
                wait = max(1, int(times[0] + self.window_s - time.monotonic()) + 1)
                raise HTTPException(
                    429,
                    f"too many failed authentications from this address; retry in {wait}s",
                    headers={"Retry-After": str(wait)},
                )

    def failed(self, client: str) -> None:
        """Count one failed authentication of `client`."""
        with self._lock:
            now = time.monotonic()
            times = self._recent(client, now)
            if times is None:
                times = self._failures[client] = deque(maxlen=self.limit)
                while len(self._failures) > self.max_clients:
                    self._failures.popitem(last=False)
            times.append(now)
            self._failures.move_to_end(client)

    def _recent(self, client: str, now: float) -> deque[float] | None:
        times = self._failures.get(client)
        while times and times[0] < now - self.window_s:
            times.popleft()
        return times


def client_address(request: Request) -> str:
    """The caller's address (behind a proxy: the proxy's, unless uvicorn is told to trust it)."""
    return request.client.host if request.client else "unknown"


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
    _waiting: int = field(default=0, repr=False)
    _ownership: LogOwnership | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.throttle = AuthThrottle(self.settings.api.auth_failures, self.settings.api.auth_window_s)

    def authenticate(self, request: Request, api_key: str | None, header: str = "X-API-Key") -> str:
        """The tenant of `api_key`; 401 when missing or unknown, 429 after too many failures."""
        client = client_address(request)
        self.throttle.check(client)
        if not api_key:
            raise HTTPException(401, f"missing {header} header", headers={"WWW-Authenticate": "ApiKey"})
        found = self.settings.api.keys.get(api_key)
        if found is None:
            self.throttle.failed(client)
            raise HTTPException(401, "unknown API key", headers={"WWW-Authenticate": "ApiKey"})
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
            PublishError: it took too long, or too many broker calls are already waiting.
        """
        api = self.settings.api
        with self._lock:
            if self._writers is None:
                self._writers = ThreadPoolExecutor(api.publish_concurrency, thread_name_prefix="api-publish")
            if self._waiting >= api.publish_concurrency:
                raise PublishError(f"{self._waiting} writes are already waiting for the broker")
            self._waiting += 1
        loop = asyncio.get_running_loop()
        # In the request's context: the write continues the request's trace (and its log ids).
        context = contextvars.copy_context()
        future = loop.run_in_executor(self._writers, lambda: context.run(work, *args))
        future.add_done_callback(self._done)
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

    def _done(self, _future: object) -> None:
        with self._lock:
            self._waiting -= 1

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
