"""Live updates: server-sent events fed from the read side, bounded and back-pressured.

A stream polls the store (every `console_poll_s`) with the API's query functions and sends
only what changed: new timeline items rendered as escaped HTML (`append`), a hint to refresh
the panels (`changed`), or `reload` when the active branch no longer extends what the page
shows. Back-pressure: the next poll waits until the previous message was written to the
socket (uvicorn pauses the writer while the client's buffer is full), and one message carries
at most `BATCH` events. Bounds: `console_streams` per process, `console_streams_per_tenant` and
`console_streams_per_session`; past them a stream answers 503 and the page's script retries
later. A stream ends after `LIFETIME_S` (the browser reconnects and the session is checked
again) and as soon as its session signs out (checked every `RECHECK_S`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from sqlalchemy.engine import Connection, Engine

from convdb.consumers.api.conversations import conversation_page
from convdb.consumers.api.deps import context
from convdb.consumers.console.render import fragment
from convdb.consumers.console.session import ConsoleUser
from convdb.consumers.console.web import ConsoleState, console_state, current_user
from convdb.consumers.effects import conversation_status, counts_by_status
from convdb.consumers.views.queries import BranchHead, branch_events, branch_head
from convdb.consumers.views.segments import Segments

router = APIRouter(include_in_schema=False)

BATCH = 100
LIFETIME_S = 300.0
HEARTBEAT_S = 15.0
RECHECK_S = 5.0
"""How often an open stream checks that its session is still signed in."""
MAX_SINCE = 2**62
_LINES = re.compile(r"\r\n|\r|\n")


def sse(event: str, data: str = "", event_id: str | None = None) -> str:
    """One server-sent event; every line break of `data` (CR too) starts a new `data:` line."""
    head = [f"event: {event}"]
    if event_id and not _LINES.search(event_id):
        head.append(f"id: {event_id}")
    return "\n".join([*head, *(f"data: {line}" for line in _LINES.split(data))]) + "\n\n"


class _GatedStream(StreamingResponse):
    """A stream that gives its slot back however it ends (even if it never started)."""

    def __init__(self, content: AsyncIterator[str], release: Callable[[], None]) -> None:
        super().__init__(
            content,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def _open(request: Request, step: Callable[[], list[str]]) -> Response:
    user = current_user(request)
    if user is None:
        return PlainTextResponse("sign in first", status_code=401)
    state = console_state(request)
    refused = state.gate.acquire(user.tenant_id, user.nonce)
    if refused is not None:
        return PlainTextResponse(
            f"too many live streams: {refused}; retry later", status_code=503, headers={"Retry-After": "10"}
        )
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            state.gate.release(user.tenant_id, user.nonce)

    return _GatedStream(_pump(request, step, state, user), release)


async def _pump(
    request: Request, step: Callable[[], list[str]], state: ConsoleState, user: ConsoleUser
) -> AsyncIterator[str]:
    yield "retry: 2000\n\n"
    deadline, quiet_since = time.monotonic() + LIFETIME_S, time.monotonic()
    checked = time.monotonic()
    while time.monotonic() < deadline and not await request.is_disconnected():
        if time.monotonic() - checked > RECHECK_S:
            # A session signed out elsewhere (another tab, a copied cookie) stops streaming.
            if not await run_in_threadpool(state.sessions.valid, user):
                yield sse("reload")
                return
            checked = time.monotonic()
        messages = await run_in_threadpool(step)
        for message in messages:
            yield message  # returns only once the message was handed to the socket
        if any(m.startswith(("event: reload", "event: gone")) for m in messages):
            return
        if messages:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > HEARTBEAT_S:
            yield ": keep-alive\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(0 if any(m.startswith("event: append") for m in messages) else state.poll_s)


def list_version(conn: Connection, tenant_id: str) -> str:
    """A digest of what the list and queue pages show that changes with them (newest conversation,
    operation counts): a page carries it, and its stream reports a change from there."""
    newest = conversation_page(conn, tenant_id, limit=1, order="recent")["conversations"]
    key = [newest, sorted(counts_by_status(conn, tenant_id).items())]
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def conversation_version(conn: Connection, conversation_id: str, head: BranchHead) -> str:
    """A digest of a conversation's view row and effect facts (what its panels show)."""
    status = conversation_status(conn, conversation_id) or {}
    key = [head.event_count, head.updated_us, head.branch_length, head.active_leaf, status]
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


Version = Annotated[str | None, Query(max_length=64, description="The page's version (from its render).")]


@router.get("/console/live/conversations", summary="console: live list updates")
def live_list(request: Request, v: Version = None) -> Response:
    """`changed` whenever the tenant's conversations or human queue differ from version `v`."""
    user = current_user(request)
    if user is None:
        return PlainTextResponse("sign in first", status_code=401)
    engine, tenant_id = context(request).engine, user.tenant_id
    seen = [v]

    def step() -> list[str]:
        with engine.connect() as conn:
            now = list_version(conn, tenant_id)
        before, seen[0] = seen[0], now
        return [sse("changed")] if before is not None and before != now else []

    return _open(request, step)


@router.get("/console/live/conversations/{conversation_id}", summary="console: live timeline")
def live_conversation(
    request: Request,
    conversation_id: str,
    since: Annotated[int, Query(ge=0, le=MAX_SINCE)] = 0,
    tail: Annotated[str, Query(max_length=400)] = "",
    last_event_id: Annotated[str | None, Header(max_length=500)] = None,
    v: Version = None,
) -> Response:
    """New active-branch events after branch index `since` (whose last event is `tail`), as HTML."""
    user = current_user(request)
    if user is None:
        return PlainTextResponse("sign in first", status_code=401)
    with context(request).engine.connect() as conn:
        if branch_head(conn, user.tenant_id, conversation_id) is None:
            return PlainTextResponse("no such conversation", status_code=404)
    resumed = _resume_point(last_event_id)
    if resumed is not None:  # a reconnect continues where the browser's last message left it
        since, tail = resumed
    feed = _Feed(context(request).engine, user.tenant_id, conversation_id, since, tail, v)
    return _open(request, feed.step)


def _resume_point(last_event_id: str | None) -> tuple[int, str] | None:
    """`(since, tail)` of a `Last-Event-ID` this server sent (`<index>:<event id>`); None otherwise.

    Anything else is ignored (the query's `since` and `tail` stand): a header is the client's to
    forge, and `str.isdigit` alone takes '¹' or '٣', which `int` refuses.
    """
    if not last_event_id:
        return None
    index, _, tail = last_event_id.partition(":")
    if not (index.isascii() and index.isdigit()) or len(index) > 19 or int(index) > MAX_SINCE:
        return None
    return int(index), tail[:400]


class _Feed:
    """What one conversation stream has sent so far, and the next poll."""

    def __init__(
        self, engine: Engine, tenant_id: str, conversation_id: str, since: int, tail: str, version: str | None
    ) -> None:
        self.engine, self.tenant_id, self.conversation_id = engine, tenant_id, conversation_id
        self.since, self.tail, self.version = since, tail, version
        self.behind = True

    def step(self) -> list[str]:
        """Messages for this poll: `append` (new items), `changed` (panels), `reload` or `gone`."""
        with self.engine.connect() as conn:
            head = branch_head(conn, self.tenant_id, self.conversation_id)
            if head is None:
                return [sse("gone")]
            version = conversation_version(conn, self.conversation_id, head)
            if version == self.version and not self.behind:
                return []
            if not self._extends(conn, head.segments, head.branch_length):
                return [sse("reload")]
            news = branch_events(conn, self.conversation_id, head.segments, self.since, self.since + BATCH)
        messages = []
        if news:
            self.since, self.tail = self.since + len(news), news[-1]["id"]
            messages.append(sse("append", fragment("_events.html", events=news), f"{self.since}:{self.tail}"))
        self.behind = self.since < head.branch_length  # more than one batch: poll again at once
        if self.version is not None and version != self.version:
            messages.append(sse("changed"))
        self.version = version
        return messages

    def _extends(self, conn: Any, segments: Segments, length: int) -> bool:
        """True when the branch still starts with what the page shows (its item `since - 1` is `tail`)."""
        if self.since == 0:
            return True
        if self.since > length:
            return False
        (last,) = branch_events(conn, self.conversation_id, segments, self.since - 1, self.since)
        return bool(last["id"] == self.tail)
