"""HTML rendering for the console: one Jinja2 environment (autoescaping on), filters, headers.

Every value from the log (message texts, tool arguments, titles, ids) is untrusted: templates
never mark one safe, and the Content-Security-Policy allows scripts from this origin only, so
an injected `<script>` would not run even if an escape were missed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from convdb.consumers.api._body import read_capped
from convdb.consumers.console import crash

MAX_FORM_BYTES = 256 * 1024
"""Largest POST body a console form may send (a message is at most 100k characters)."""

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; "
    "object-src 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


KIND_LABELS = {
    "system_prompt": "System prompt",
    "message": "Message",
    "action": "Tool call",
    "observation": "Observation",
    "agent_error": "Error",
    "user_reject": "Rejected",
    "condensation": "Condensation",
    "pause": "Pause",
    "state_update": "State change",
    "llm_usage": "LLM call",
    "fork": "Fork",
    "active_leaf_changed": "Branch switch",
    "title": "Title",
    "external": "Foreign record",
}
"""How the timeline names each event kind."""

BOOKKEEPING_KINDS = frozenset({"llm_usage", "state_update", "title"})
"""Kinds the timeline collapses by default (a filter shows them): the runtime's bookkeeping."""

LABEL_ONLY_KINDS = frozenset({"external"})
"""Kinds the timeline shows by their label alone: `_events.html` has a body for every other kind."""


def _ago(value: str | datetime | None, now: datetime | None = None) -> str:
    if value is None:
        return "never"
    when = datetime.fromisoformat(value) if isinstance(value, str) else value
    seconds = int(((now or datetime.now(UTC)) - when).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if abs(seconds) >= size:
            return f"{seconds // size} {unit} ago"
    return f"{max(seconds, 0)} s ago"


def _clock(value: str | datetime | None) -> str:
    if value is None:
        return ""
    when = datetime.fromisoformat(value) if isinstance(value, str) else value
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return value
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _cost(value: float | None) -> str:
    return "–" if value is None else f"${value:,.4f}"


def _script_lines(text: str) -> list[tuple[str, str, str]]:
    """A user message as (what, text, arguments) lines: `("text", line, "")`, or a scripted model's
    directive (`convdb.producers.scripted`): `("call", tool, json)` for `!tool {json}` (a new step)
    and `("parallel", tool, json)` for `+tool {json}` (another call in the same step)."""
    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        name, _, args = stripped[1:].partition(" ")
        if stripped[:1] in ("!", "+") and name.strip():
            lines.append(("call" if stripped[0] == "!" else "parallel", name.strip(), args.strip() or "{}"))
        else:
            lines.append(("text", line, ""))
    return lines


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("convdb.consumers.console", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        ago=_ago,
        clock=_clock,
        pretty=_pretty,
        cost=_cost,
        thousands=lambda n: f"{n or 0:,}",
        q=lambda v: quote(str(v), safe=""),
        script_lines=_script_lines,
    )
    env.globals["labels"] = KIND_LABELS
    env.globals["bookkeeping"] = BOOKKEEPING_KINDS
    env.globals["op_headline"] = crash.headline
    env.globals["op_evidence"] = crash.reason_and_detail
    return env


ENV = _environment()


def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A template rendered to an HTML response with the console's security headers."""
    html = ENV.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def fragment(name: str, **context: Any) -> str:
    """A template rendered to text (for live updates)."""
    return ENV.get_template(name).render(**context)


def redirect(url: str) -> RedirectResponse:
    """A 303 See Other (the answer to a form POST)."""
    return RedirectResponse(url, status_code=303, headers={"Cache-Control": "no-store"})


async def form(request: Request) -> dict[str, str]:
    """The urlencoded body of a form POST (first value of each field); 413/415 when it is not one."""
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind != "application/x-www-form-urlencoded":
        raise HTTPException(415, "expected a form (application/x-www-form-urlencoded)")
    body = await read_capped(request, MAX_FORM_BYTES, "form")
    try:
        fields = parse_qs(body.decode(), keep_blank_values=True, strict_parsing=False, max_num_fields=20)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPException(400, f"bad form: {exc}") from exc
    return {k: v[0] for k, v in fields.items()}
