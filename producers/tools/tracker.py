"""HTTP client tools for the issue-tracker provider: keyed create_issue, irreversible notify."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx
from pydantic import Field

from convdb.infra.settings import Settings
from convdb.producers.errors import EffectError, OutcomeUnknownError
from convdb.producers.tools.base import Operation, Tool, ToolArgs, ToolResult, ask_provider
from convdb.projections.operation import OperationState
from convdb.projections.settlement import LookupResult
from convdb.schemas._types import EffectClass


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
    try:
        answer = httpx.request(method, url, json=body, headers=headers, timeout=timeout)
    except httpx.ConnectError as exc:
        # The request never reached the provider: provably not done.
        why = f"{type(exc).__name__}: {exc}"
        raise EffectError(f"{method} {url}: cannot connect ({why})", retryable=True) from exc
    except httpx.HTTPError as exc:
        raise OutcomeUnknownError(f"{method} {url}: no answer ({type(exc).__name__}: {exc})") from exc
    try:
        return Response(answer.status_code, answer.json())
    except ValueError:
        return Response(answer.status_code, None)


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
        url = str(httpx.URL(f"{self.base_url}/issues/by-key", params={"key": operation.operation_id}))
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


class TrackerResolver:
    """The reconciler's resolver for `create_issue`: the tool's own lookup (one implementation).

    Registered in the `convdb.resolvers` entry-point group through `tracker_resolver`.
    """

    def __init__(self, settings: Settings) -> None:
        url = settings.reconciler.resolver_urls.get("tracker")
        if not url:
            raise ValueError(
                'tracker resolver: set CONVDB_RECONCILER__RESOLVER_URLS=\'{"tracker": "http://..."}\''
            )
        self.tool = CreateIssueTool(base_url=url.rstrip("/"), timeout_s=settings.reconciler.lookup_timeout_s)

    def lookup(self, operation: OperationState) -> LookupResult:
        """The issue created under this operation's idempotency key, if any."""
        op = Operation(
            operation_id=operation.operation_id,
            conversation_id=operation.conversation_id,
            tenant_id=operation.tenant_id,
            action_id=operation.action_id,
            tool_name=operation.tool_name,
            arguments={},
            attempt=operation.attempt,
        )
        return ask_provider(self.tool, op)


def tracker_resolver(settings: Settings) -> TrackerResolver | None:
    """The tracker resolver, or None when no tracker URL is configured here (it is then skipped)."""
    return TrackerResolver(settings) if settings.reconciler.resolver_urls.get("tracker") else None
