"""Start the provider as a real child process (demo and tests)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from convdb.infra.procs import free_port, spawn, stop_group, wait_for_port


class ProviderProcess:
    """`python -m convdb dev tracker` on a free loopback port; dies with its parent."""

    def __init__(self, log_path: Path, receipts_url: str | None = None, secret: str = "") -> None:
        self.log_path = log_path
        self.port = free_port()
        self.receipts_url = receipts_url
        self.secret = secret
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL of the tracker."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ProviderProcess:
        argv = [sys.executable, "-m", "convdb", "dev", "tracker", "--port", str(self.port)]
        if self.receipts_url:
            argv += ["--receipts-url", self.receipts_url, "--receipt-secret", self.secret]
        self.proc = spawn(argv, self.log_path)
        wait_for_port(self.proc, self.port, 20.0, "issue-tracker provider", self.log_path)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop_group(self.proc.pid, timeout=5.0)
            self.proc.wait(timeout=5.0)

    def get(self, path: str) -> Any:
        """GET a JSON endpoint (e.g. /stats)."""
        with urllib.request.urlopen(self.url + path, timeout=5) as answer:
            return json.loads(answer.read())

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """POST JSON to an endpoint (e.g. /admin/fail)."""
        request = urllib.request.Request(
            self.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=5) as answer:
            return json.loads(answer.read())
