"""Console actions (POST forms): sign in and out, send a message, pause/resume/cancel, decide an operation.

Each action calls the JSON API's own function (`send_to_inbox`, `owned_operation`,
`record_decision`), so the console cannot do anything the tenant's API key could not.
Every form carries the session's CSRF token; sign-in carries the login cookie's.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import ValidationError

from convdb.consumers.api._slots import WriteShareError, act_for
from convdb.consumers.api.auth import client_address
from convdb.consumers.api.deps import Conn, context
from convdb.consumers.api.messages import send_to_inbox
from convdb.consumers.api.operations import Resolve, owned_operation, record_decision
from convdb.consumers.console.render import form, redirect, render
from convdb.consumers.console.session import COOKIE, LOGIN_COOKIE, ConsoleUser, same_token, set_cookie
from convdb.consumers.console.web import console_state, current_user, error_page, login_redirect, signed_in
from convdb.infra.errors import PublishError
from convdb.schemas._types import InboxCommand
from convdb.schemas.errors import InvalidValueError
from convdb.schemas.validation import check_operation_id, conversation_id_problem, shown, text_problem

router = APIRouter(include_in_schema=False)

LOGIN_PATH = "/console/login"
MAX_MESSAGE = 100_000


@router.get(LOGIN_PATH, summary="console: sign-in form")
def login_form(request: Request) -> Response:
    """The sign-in form (a signed-in user goes to the conversations)."""
    if current_user(request) is not None:
        return redirect("/")
    return _login_page(request)


def _login_page(request: Request, error: str | None = None, status: int = 200) -> Response:
    token = console_state(request).sessions.login_token()
    response = render(
        "login.html", status, page_title="Sign in", csrf=token, error=error, user=None, unknowns=0, nav=""
    )
    set_cookie(response, request, LOGIN_COOKIE, token, max_age=1800, path=LOGIN_PATH)
    return response


@router.post(LOGIN_PATH, summary="console: sign in")
async def login(request: Request) -> Response:
    """Check the API key once and start a session cookie (the key itself is never stored in it).

    Throttled both ways: unknown keys count against the address and the key prefix
    (`AuthThrottle`, 429 past `auth_failures`), and a tenant starts at most `console_sign_ins`
    sessions per window, so sessions (and the live streams they hold) are never free.
    """
    fields = await form(request)
    if not same_token(request.cookies.get(LOGIN_COOKIE, ""), fields.get("csrf")):
        return _login_page(request, "The sign-in form expired. Please try again.", 403)
    state = console_state(request)
    api_key = fields.get("api_key", "")
    # The name goes into `decided_by` on the ledger: printable characters only.
    name = "".join(c for c in " ".join(fields.get("name", "").split()) if c.isprintable())[:80]
    tenant = state.sessions.tenant_of_key(api_key) if api_key else None
    if tenant is None:
        try:
            context(request).throttle.failed(client_address(request), api_key)
        except HTTPException as exc:
            return _login_page(request, str(exc.detail), 429)
        return _login_page(request, "Unknown API key.", 401)
    wait = state.sign_ins.wait_s(tenant)
    if wait is not None:
        limit = context(request).settings.api.console_sign_ins
        problem = (
            f"Too many sign-ins for this tenant (CONVDB_API__CONSOLE_SIGN_INS={limit}); retry in {wait}s."
        )
        return _login_page(request, problem, 429)
    state.sign_ins.add(tenant)
    response = redirect("/")
    set_cookie(response, request, COOKIE, state.sessions.issue(api_key, name), max_age=state.sessions.ttl_s)
    response.delete_cookie(LOGIN_COOKIE, path=LOGIN_PATH)
    return response


@router.post("/console/logout", summary="console: sign out")
async def logout(request: Request) -> Response:
    """End the session: recorded in the store, so the cookie (and any copy of it) is refused from now on."""
    user = await signed_in(request)
    fields = await form(request)
    if user is not None:
        if not same_token(user.csrf, fields.get("csrf")):
            return error_page(user, HTTPException(403, "bad or missing form token; reload the page"))
        await run_in_threadpool(console_state(request).sessions.revoke, user)
    response = redirect(LOGIN_PATH)
    response.delete_cookie(COOKIE, path="/")
    return response


async def _checked(request: Request) -> tuple[ConsoleUser | None, dict[str, str], Response | None]:
    """The user and form of an action, or the response refusing it (no session, bad CSRF token)."""
    user = await signed_in(request)
    if user is None:
        return None, {}, login_redirect()
    act_for(user.tenant_id)  # its writes count against the tenant's share of the write slots
    fields = await form(request)
    if not same_token(user.csrf, fields.get("csrf")):
        return (
            user,
            fields,
            error_page(user, HTTPException(403, "bad or missing form token; reload the page")),
        )
    return user, fields, None


@router.post("/console/conversations/{conversation_id}/messages", summary="console: send a message")
async def send_message(request: Request, conversation_id: str) -> Response:
    """A user message into the conversation's inbox (durable before the redirect)."""
    user, fields, refused = await _checked(request)
    if refused or user is None:
        return refused or login_redirect()
    content = fields.get("content", "")
    if not content.strip() or len(content) > MAX_MESSAGE or text_problem(content):
        problem = text_problem(content) or f"must have 1 to {MAX_MESSAGE} characters"
        return error_page(user, HTTPException(400, f"the message {problem}"))
    return await _inbox(request, user, conversation_id, "message", content, "sent")


@router.post("/console/conversations/{conversation_id}/pause", summary="console: pause")
async def pause(request: Request, conversation_id: str) -> Response:
    """Ask the runner to pause the conversation."""
    user, _, refused = await _checked(request)
    if refused or user is None:
        return refused or login_redirect()
    return await _inbox(request, user, conversation_id, "pause", "", "pause")


@router.post("/console/conversations/{conversation_id}/resume", summary="console: resume")
async def resume(request: Request, conversation_id: str) -> Response:
    """Ask the runner to resume the conversation."""
    user, _, refused = await _checked(request)
    if refused or user is None:
        return refused or login_redirect()
    return await _inbox(request, user, conversation_id, "resume", "", "resume")


@router.post("/console/conversations/{conversation_id}/cancel", summary="console: cancel")
async def cancel(request: Request, conversation_id: str) -> Response:
    """Ask the runner to cancel the conversation's run and the task tree below it."""
    user, _, refused = await _checked(request)
    if refused or user is None:
        return refused or login_redirect()
    return await _inbox(request, user, conversation_id, "cancel", "", "cancel")


async def _inbox(
    request: Request,
    user: ConsoleUser,
    conversation_id: str,
    command: InboxCommand,
    content: str,
    notice: str,
) -> Response:
    ctx = context(request)
    sender = user.name or "user"
    if conversation_id_problem(conversation_id):
        return error_page(user, HTTPException(404, f"no conversation {shown(conversation_id)}"))
    try:
        await send_to_inbox(
            ctx,
            user.tenant_id,
            conversation_id,
            command,
            content,
            sender,
            must_exist=True,
        )
    except HTTPException as exc:
        return error_page(user, exc)
    except PublishError as exc:
        return error_page(user, _unavailable(exc))
    return redirect(f"/console/conversations/{quote(conversation_id, safe='')}?notice={notice}")


@router.post("/console/operations/resolve", summary="console: decide an unknown operation")
async def resolve(request: Request, conn: Conn) -> Response:
    """A human decision on an unknown operation: on the ledger with who decided, then the runner is woken."""
    user, fields, refused = await _checked(request)
    if refused or user is None:
        return refused or login_redirect()
    operation_id = fields.get("operation_id", "")
    try:
        check_operation_id(operation_id)
    except InvalidValueError:
        return error_page(user, HTTPException(404, f"no operation {shown(operation_id)}"))
    try:
        body = Resolve(decision=fields.get("decision", ""), note=fields.get("note", ""))
    except ValidationError:
        problem = "decide with one of the three buttons (the note has at most 2000 characters)"
        return error_page(user, HTTPException(400, problem))
    try:
        state = await run_in_threadpool(owned_operation, conn, user.tenant_id, operation_id)
        await record_decision(context(request), state, body, user.decided_by)
    except HTTPException as exc:
        return error_page(user, exc)
    except PublishError as exc:
        return error_page(user, _unavailable(exc))
    return redirect("/console/queue?" + urlencode({"resolved": operation_id, "decision": body.decision}))


def _unavailable(exc: PublishError) -> HTTPException:
    if isinstance(exc, WriteShareError):
        return HTTPException(429, f"too many writes at once, try again in a moment: {exc}")
    return HTTPException(503, f"not acknowledged by the broker, try again: {exc}")
