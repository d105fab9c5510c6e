"""What every console route shares: the per-process console state, the session user, page helpers."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, get_args

from fastapi import HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.engine import Connection

from convdb.consumers.api.auth import SlidingWindow
from convdb.consumers.api.conversations import ExecutionStatus
from convdb.consumers.api.deps import context
from convdb.consumers.console.render import redirect, render
from convdb.consumers.console.session import ConsoleUser, Sessions
from convdb.consumers.effects import counts_by_status

STATUSES: tuple[str, ...] = get_args(ExecutionStatus)
"""The statuses the conversation list is filtered by: the API's."""


@dataclass
class StreamGate:
    """Bounds open live-update streams: in all, per tenant, and per session (one per tab, a few tabs)."""

    total: int
    per_tenant: int
    per_session: int
    _sessions: dict[str, int] = field(default_factory=dict)
    _tenants: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def acquire(self, tenant: str, session: str) -> str | None:
        """Take a slot for `session` of `tenant`; the bound reached when there is none (else None)."""
        with self._lock:
            if sum(self._tenants.values()) >= self.total:
                return f"every live stream of this server is taken (CONVDB_API__CONSOLE_STREAMS={self.total})"
            if self._tenants.get(tenant, 0) >= self.per_tenant:
                return (
                    f"your tenant holds {self.per_tenant} live streams already "
                    "(CONVDB_API__CONSOLE_STREAMS_PER_TENANT)"
                )
            if self._sessions.get(session, 0) >= self.per_session:
                return (
                    f"this session holds {self.per_session} live streams already "
                    "(CONVDB_API__CONSOLE_STREAMS_PER_SESSION); close a tab"
                )
            _add(self._tenants, tenant, 1)
            _add(self._sessions, session, 1)
            return None

    def release(self, tenant: str, session: str) -> None:
        """Give a slot back."""
        with self._lock:
            _add(self._tenants, tenant, -1)
            _add(self._sessions, session, -1)

    @property
    def open(self) -> int:
        """Streams open now."""
        with self._lock:
            return sum(self._tenants.values())


def _add(counts: dict[str, int], name: str, delta: int) -> None:
    left = counts.get(name, 0) + delta
    if left > 0:
        counts[name] = left
    else:
        counts.pop(name, None)


@dataclass
class ConsoleState:
    """Per-process console state, kept on the app beside the API context."""

    sessions: Sessions
    gate: StreamGate
    poll_s: float
    sign_ins: SlidingWindow
    """Sign-ins per tenant in the last `auth_window_s` (`console_sign_ins` at most)."""


def console_state(request: Request) -> ConsoleState:
    """The app's console state, made on first use from the API settings."""
    store = request.app.state._state
    found = store.get("console")
    if found is None:
        ctx = context(request)
        api = ctx.settings.api
        made = ConsoleState(
            Sessions(api, ctx.engine),
            StreamGate(api.console_streams, api.console_streams_per_tenant, api.console_streams_per_session),
            api.console_poll_s,
            SlidingWindow(api.console_sign_ins, api.auth_window_s),
        )
        found = store.setdefault("console", made)  # two first requests at once keep one state
    return found


def current_user(request: Request) -> ConsoleUser | None:
    """The signed-in console user, or None (reads the store: from a worker thread)."""
    return console_state(request).sessions.user(request)


async def signed_in(request: Request) -> ConsoleUser | None:
    """`current_user` from the event loop (the session check reads the store on a worker thread)."""
    return await run_in_threadpool(current_user, request)


def login_redirect() -> Response:
    """Where a request without a session goes."""
    return redirect("/console/login")


_HEADINGS = {
    400: "Bad request",
    403: "Not allowed",
    404: "Not found",
    409: "Nothing to do",
    429: "Too many requests",
}


def error_page(user: ConsoleUser | None, exc: HTTPException) -> HTMLResponse:
    """An HTTP error as a console page (never a traceback, never JSON)."""
    heading = _HEADINGS.get(exc.status_code, "Something went wrong")
    return render(
        "error.html",
        exc.status_code,
        page_title=heading,
        heading=heading,
        message=str(exc.detail),
        user=user,
        nav="",
        unknowns=0,
    )


def unknowns(conn: Connection, tenant_id: str) -> int:
    """How many operations wait in the tenant's human queue (the navigation badge)."""
    return counts_by_status(conn, tenant_id).get("unknown", 0)


def parse_time(value: str | None, name: str) -> datetime | None:
    """A time from a form (`YYYY-MM-DD[ HH:MM[:SS]]`, taken as UTC) or ISO-8601 text; 400 when unreadable."""
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise HTTPException(400, f"`{name}` is not a time: {value!r} (use 2025-01-31 12:00:00, UTC)") from exc
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def parse_int(value: str | None, name: str, upper: int = 2**62) -> int | None:
    """A non-negative bounded integer from a query string; 400 otherwise."""
    if value is None or value == "":
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > 20 or int(value) > upper:
        raise HTTPException(400, f"`{name}` must be an integer from 0 to {upper}, not {value[:40]!r}")
    return int(value)


def local_input(value: datetime | None) -> str:
    """A time as a form input shows it: `YYYY-MM-DD HH:MM:SS`, in UTC (the label says so)."""
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def page_context(user: ConsoleUser, conn: Connection, nav: str, title: str, **more: Any) -> dict[str, Any]:
    """Context every signed-in page template gets."""
    return {"user": user, "unknowns": unknowns(conn, user.tenant_id), "nav": nav, "page_title": title, **more}
