"""HTTP client tools for the issue-tracker provider: keyed create_issue, irreversible notify."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import Field

from producers.errors import EffectError, OutcomeUnknownError
from producers.tools.base import Operation, Tool, ToolArgs, ToolResult
from schemas._types import EffectClass


class IssueArgs(ToolArgs):
    """Arguments of create_issue."""

    title: str = Field(description="Issue title.")
    body: str = Field("", description="Issue text.")


class NotifyArgs(ToolArgs):
    """Arguments of notify."""

    to: str = Field(description="Recipient.")
    text: str = Field(description="Message text.")


@dataclass(frozen=True)
class Response:
    """An HTTP answer: status and JSON body (None when the body is not JSON)."""

    status: int
    body: Any


def _call(
    method: str, url: str, timeout: float, body: Any = None, headers: dict[str, str] | None = None
) -> Response:
    """One HTTP request, with transport errors sorted into not-done and unknown."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return Response(answer.status, _json(answer.read()))
    except urllib.error.HTTPError as exc:
        return Response(exc.code, _json(exc.read()))
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            # The request never reached the provider: provably not done.
            raise EffectError(f"{method} {url}: cannot connect: {exc.reason}", retryable=True) from exc
        raise OutcomeUnknownError(f"{method} {url}: no answer ({exc.reason})") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise OutcomeUnknownError(f"{method} {url}: no answer ({type(exc).__name__}: {exc})") from exc


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except json.JSONDecodeError:
        return None


def _check(response: Response, what: str) -> dict[str, Any]:
    if response.status >= 500:
        raise OutcomeUnknownError(f"{what}: provider error {response.status}")
    if response.status >= 400:
        raise EffectError(f"{what}: rejected {response.status}: {response.body}")
    if not isinstance(response.body, dict):
        raise OutcomeUnknownError(f"{what}: unexpected answer {response.body!r:.200}")
    return response.body


class CreateIssueTool(Tool):
    """Creates an issue; the operation_id is the Idempotency-Key, and `lookup` asks by key."""

    name: ClassVar[str] = "create_issue"
    description: ClassVar[str] = "Create an issue on the issue tracker."
    effect_class: ClassVar[EffectClass] = "keyed"
    Args: ClassVar[type[ToolArgs]] = IssueArgs
    supports_lookup: ClassVar[bool] = True
    base_url: str
    timeout_s: float = 10.0

    def target(self, arguments: dict[str, Any]) -> str | None:  # noqa: ARG002
        """Issues of this tracker."""
        return "tracker:issues"

    def execute(self, operation: Operation) -> ToolResult:
        """POST /issues with the operation id as idempotency key."""
        headers = {"Idempotency-Key": operation.operation_id, "X-Tenant-Id": operation.tenant_id}
        url = f"{self.base_url}/issues"
        response = _call("POST", url, self.timeout_s, operation.arguments, headers)
        return self._result(_check(response, f"create_issue {operation.operation_id}"))

    def lookup(self, operation: Operation) -> ToolResult | None:
        """GET /issues/by-key: the issue, or None when the tracker never saw this key."""
        url = f"{self.base_url}/issues/by-key?{urllib.parse.urlencode({'key': operation.operation_id})}"
        response = _call("GET", url, self.timeout_s)
        if response.status == 404:
            return None
        return self._result(_check(response, f"lookup {operation.operation_id}"))

    @staticmethod
    def _result(issue: dict[str, Any]) -> ToolResult:
        return ToolResult(json.dumps(issue, sort_keys=True), provider_receipt=issue.get("receipt"))


class NotifyTool(Tool):
    """Sends a notification: irreversible, no idempotency and no lookup."""

    name: ClassVar[str] = "notify"
    description: ClassVar[str] = "Send a notification to someone (cannot be undone)."
    effect_class: ClassVar[EffectClass] = "irreversible"
    Args: ClassVar[type[ToolArgs]] = NotifyArgs
    base_url: str
    timeout_s: float = 10.0

    def target(self, arguments: dict[str, Any]) -> str | None:
        """The recipient."""
        return f"notify:{arguments.get('to', '')}"

    def execute(self, operation: Operation) -> ToolResult:
        """POST /notifications (X-Operation-Id only labels the call in the provider's stats)."""
        headers = {"X-Operation-Id": operation.operation_id}
        url = f"{self.base_url}/notifications"
        response = _call("POST", url, self.timeout_s, operation.arguments, headers)
        body = _check(response, f"notify {operation.operation_id}")
        return ToolResult(f"notification {body.get('id')} sent", provider_receipt=f"note-{body.get('id')}")
