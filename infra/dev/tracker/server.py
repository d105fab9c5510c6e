"""An in-memory issue tracker over HTTP: keyed issues, irreversible notifications, fault injection."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

logger = logging.getLogger(__name__)


@dataclass
class ReceiptTarget:
    """Where receipts go and how they are signed."""

    url: str
    provider: str
    secret: str


@dataclass
class ProviderState:
    """Everything the provider knows; one lock guards it."""

    receipts: ReceiptTarget | None = None
    issues: dict[str, dict[str, Any]] = field(default_factory=dict)
    notifications: list[dict[str, Any]] = field(default_factory=list)
    by_key: Counter[str] = field(default_factory=Counter)
    mutations: int = 0
    requests: int = 0
    fail_mode: str = "none"
    fail_count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stats(self) -> dict[str, Any]:
        """The counters tests use to assert at-most/exactly-once."""
        return {
            "mutations": self.mutations,
            "issues": len(self.issues),
            "notifications": len(self.notifications),
            "requests": self.requests,
            "by_key": dict(self.by_key),
        }

    def take_fault(self) -> bool:
        """True when this mutation must drop its response (consumes one injected fault)."""
        if self.fail_mode == "drop_response" and self.fail_count > 0:
            self.fail_count -= 1
            return True
        return False


class Handler(BaseHTTPRequestHandler):
    """Routes the tracker's endpoints."""

    server: TrackerServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        logger.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _drop(self) -> None:
        # The mutation happened, but the client never learns it: the ambiguous outcome.
        self.close_connection = True
        self.connection.close()

    def _body(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            return None
        return body if isinstance(body, dict) else None

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        state = self.server.state
        url = urlparse(self.path)
        with state.lock:
            state.requests += 1
            if url.path == "/stats":
                return self._send(200, state.stats())
            if url.path == "/issues/by-key":
                key = parse_qs(url.query).get("key", [""])[0]
                issue = state.issues.get(key)
                return self._send(200, issue) if issue else self._send(404, {"error": "not found"})
        self._send(404, {"error": f"no route {url.path}"})

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        body = self._body()
        if body is None:
            return self._send(400, {"error": "body must be a JSON object"})
        path = urlparse(self.path).path
        routes = {"/issues": self._issues, "/notifications": self._notify, "/admin/fail": self._fail}
        route = routes.get(path)
        if route is None:
            return self._send(404, {"error": f"no route {path}"})
        route(body)

    def _issues(self, body: dict[str, Any]) -> None:
        state = self.server.state
        key = self.headers.get("Idempotency-Key")
        if not key:
            return self._send(400, {"error": "Idempotency-Key header is required"})
        if not isinstance(body.get("title"), str) or not isinstance(body.get("body", ""), str):
            return self._send(400, {"error": "title (string) and body (string) are required"})
        tenant = self.headers.get("X-Tenant-Id", "")
        with state.lock:
            state.requests += 1
            existing = state.issues.get(key)
            if existing is not None:
                return self._send(200, existing)
            issue_id = len(state.issues) + 1
            issue = {"id": issue_id, "key": key, "receipt": f"trk-{issue_id}", "title": body["title"]}
            state.issues[key] = issue
            state.by_key[key] += 1
            state.mutations += 1
            drop = state.take_fault()
        if state.receipts is not None:
            self.server.send_receipt(issue, tenant)
        return self._drop() if drop else self._send(201, issue)

    def _notify(self, body: dict[str, Any]) -> None:
        state = self.server.state
        if not isinstance(body.get("to"), str) or not isinstance(body.get("text"), str):
            return self._send(400, {"error": "to (string) and text (string) are required"})
        key = self.headers.get("X-Operation-Id", "")
        with state.lock:
            state.requests += 1
            state.notifications.append(body)
            note_id = len(state.notifications)
            state.mutations += 1
            if key:
                state.by_key[key] += 1
            drop = state.take_fault()
        return self._drop() if drop else self._send(201, {"id": note_id})

    def _fail(self, body: dict[str, Any]) -> None:
        state = self.server.state
        mode = body.get("mode")
        if mode not in ("drop_response", "none"):
            return self._send(400, {"error": "mode must be 'drop_response' or 'none'"})
        with state.lock:
            state.fail_mode = mode
            state.fail_count = int(body.get("count", 1))
        self._send(200, {"mode": mode, "count": state.fail_count})


class TrackerServer(ThreadingHTTPServer):
    """The HTTP server with its state and the receipt sender."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: ProviderState) -> None:
        super().__init__(address, Handler)
        self.state = state

    def send_receipt(self, issue: dict[str, Any], tenant: str) -> None:
        """POST a signed receipt from a background thread (best effort, a few retries)."""
        target = self.state.receipts
        if target is None:
            return
        receipt = {
            "provider": target.provider,
            "operation_id": issue["key"],
            "tenant_id": tenant,
            "provider_receipt": issue["receipt"],
            "status": "succeeded",
            "result": json.dumps(issue, sort_keys=True),
            "timestamp": datetime.now(UTC).isoformat(),
        }
        threading.Thread(target=_post_receipt, args=(target, receipt), daemon=True).start()


def _post_receipt(target: ReceiptTarget, receipt: dict[str, Any], attempts: int = 3) -> None:
    raw = json.dumps(receipt).encode()
    signature = hmac.new(target.secret.encode(), raw, hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        target.url,
        data=raw,
        method="POST",
        headers={"Content-Type": "application/json", "X-Convdb-Signature": f"sha256={signature}"},
    )
    for attempt in range(1, attempts + 1):
        try:
            with urllib.request.urlopen(request, timeout=5):
                return
        except OSError as exc:
            logger.warning("receipt %s attempt %d failed: %s", receipt["operation_id"], attempt, exc)
            threading.Event().wait(0.2 * attempt)


def make_server(port: int, state: ProviderState | None = None, host: str = "127.0.0.1") -> TrackerServer:
    """A tracker server bound to host:port (not yet serving)."""
    return TrackerServer((host, port), state or ProviderState())
