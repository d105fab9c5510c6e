"""What every console route shares: the per-process console state, the session user, page helpers."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.engine import Connection

from consumers.api.deps import context
from consumers.console.render import redirect, render
from consumers.console.session import ConsoleUser, Sessions
from consumers.effects import counts_by_status

STATUSES = (
    "idle",
    "running",
    "paused",
    "waiting_for_confirmation",
    "waiting_for_human",
    "finished",
    "error",
    "stuck",
)


@dataclass
class StreamGate:
    """Bounds open live-update streams: in all, and per session (one per tab, a few tabs)."""

    total: int
    per_session: int
    _open: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def acquire(self, session: str) -> bool:
        """Take a slot for `session`; False when either bound is reached."""
        with self._lock:
            if sum(self._open.values()) >= self.total or self._open.get(session, 0) >= self.per_session:
                return False
            self._open[session] = self._open.get(session, 0) + 1
            return True

    def release(self, session: str) -> None:
        """Give a slot back."""
        with self._lock:
            left = self._open.get(session, 0) - 1
            if left > 0:
                self._open[session] = left
            else:
                self._open.pop(session, None)

    @property
    def open(self) -> int:
        """Streams open now."""
        with self._lock:
            return sum(self._open.values())


@dataclass
class ConsoleState:
    """Per-process console state, kept on the app beside the API context."""

    sessions: Sessions
    gate: StreamGate
    poll_s: float


def console_state(request: Request) -> ConsoleState:
    """The app's console state, made on first use from the API settings."""
    store = request.app.state._state
    found = store.get("console")
    if found is None:
        api = context(request).settings.api
        made = ConsoleState(
            Sessions(api),
            StreamGate(api.console_streams, api.console_streams_per_session),
            api.console_poll_s,
        )
        found = store.setdefault("console", made)  # two first requests at once keep one state
    return found  # type: ignore[no-any-return]


def current_user(request: Request) -> ConsoleUser | None:
    """The signed-in console user, or None."""
    return console_state(request).sessions.user(request)


def login_redirect() -> Response:
    """Where a request without a session goes."""
    return redirect("/console/login")


def error_page(user: ConsoleUser | None, exc: HTTPException) -> HTMLResponse:
    """An HTTP error as a console page (never a traceback, never JSON)."""
    heading = {400: "Bad request", 403: "Not allowed", 404: "Not found", 409: "Nothing to do"}.get(
        exc.status_code, "Something went wrong"
    )
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
    """A time from a form (`datetime-local`, taken as UTC) or ISO-8601 text; 400 when unreadable."""
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise HTTPException(400, f"`{name}` is not a time: {value!r} (use 2025-01-31T12:00:00)") from exc
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def parse_int(value: str | None, name: str, upper: int = 2**62) -> int | None:
    """A non-negative bounded integer from a query string; 400 otherwise."""
    if value is None or value == "":
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > 20 or int(value) > upper:
        raise HTTPException(400, f"`{name}` must be an integer from 0 to {upper}, not {value[:40]!r}")
    return int(value)


def local_input(value: datetime | None) -> str:
    """A time as a `datetime-local` input value (UTC)."""
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def page_context(user: ConsoleUser, conn: Connection, nav: str, title: str, **more: Any) -> dict[str, Any]:
    """Context every signed-in page template gets."""
    return {"user": user, "unknowns": unknowns(conn, user.tenant_id), "nav": nav, "page_title": title, **more}
