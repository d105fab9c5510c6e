"""The issue-tracker provider as a real process: idempotency keys, lookup, faults, signed receipts."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from convdb.infra.dev.tracker.process import ProviderProcess
from convdb.producers.errors import OutcomeUnknownError
from convdb.producers.tools import CreateIssueTool, NotifyTool, Operation
from tests.conftest import wait_until


def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def op(key: str, **args: Any) -> Operation:
    return Operation(key, "c1", "t1", key.split("/")[-1], "create_issue", args)


class Receipts(BaseHTTPRequestHandler):
    """Collects receipts posted by the provider."""

    got: list[tuple[bytes, str]] = []

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        Receipts.got.append((raw, self.headers.get("X-Convdb-Signature", "")))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_issues_are_keyed_and_looked_up(tmp_path: Path) -> None:
    sink = ThreadingHTTPServer(("127.0.0.1", 0), Receipts)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    receipts_url = f"http://127.0.0.1:{sink.server_address[1]}/receipts"
    try:
        with ProviderProcess(tmp_path / "p.log", receipts_url=receipts_url, secret="k") as provider:
            url = provider.url + "/issues"
            assert post(url, {"title": "x"}, {})[0] == 400  # no Idempotency-Key
            first = post(url, {"title": "x", "body": ""}, {"Idempotency-Key": "c1/a1", "X-Tenant-Id": "t1"})
            again = post(url, {"title": "x", "body": ""}, {"Idempotency-Key": "c1/a1"})
            assert first[0] == 201 and again == (200, first[1]) and first[1]["receipt"] == "trk-1"
            tool = CreateIssueTool(base_url=provider.url)
            assert tool.lookup(op("c1/a1")).provider_receipt == "trk-1"  # type: ignore[union-attr]
            assert tool.lookup(op("c1/none")) is None
            provider.post("/admin/fail", {"mode": "drop_response", "count": 1})
            with pytest.raises(OutcomeUnknownError):
                tool.execute(op("c1/a2", title="dropped", body=""))
            assert tool.lookup(op("c1/a2")) is not None  # it happened all the same
            NotifyTool(base_url=provider.url).execute(op("c1/n1", to="ops", text="hi"))
            stats = provider.get("/stats")
            assert stats["by_key"] == {"c1/a1": 1, "c1/a2": 1, "c1/n1": 1}
            assert (stats["mutations"], stats["issues"], stats["notifications"]) == (3, 2, 1)
            wait_until(lambda: len(Receipts.got) >= 2, 10, "receipts")
    finally:
        sink.shutdown()
    raw, signature = Receipts.got[0]
    assert signature == "sha256=" + hmac.new(b"k", raw, hashlib.sha256).hexdigest()
    receipt = json.loads(raw)
    assert receipt["operation_id"] == "c1/a1" and receipt["provider_receipt"] == "trk-1"
    assert receipt["tenant_id"] == "t1" and receipt["status"] == "succeeded"
