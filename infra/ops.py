"""The ops endpoint of a long-running service: `/healthz` (truthful) and `/metrics` (Prometheus).

One small threaded HTTP server per process, on `CONVDB_OPS__PORT`. `/healthz` answers 200 while
the service's loop makes progress and nothing it depends on is known broken, 503 otherwise,
with a JSON body saying why; Kubernetes probes and the image's HEALTHCHECK read it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from convdb.infra.settings import OpsSettings

logger = logging.getLogger(__name__)

Report = tuple[bool, dict[str, Any]]
"""(healthy, details) as `/healthz` shows them."""


class Health:
    """What `/healthz` reports: the loop's last heartbeat and named problems (set, then cleared)."""

    def __init__(self, stall_after_s: float = 300.0) -> None:
        self.stall_after_s = stall_after_s
        self.last_beat = time.monotonic()
        self.problems: dict[str, str] = {}
        self.stopped = False

    def beat(self) -> None:
        """The loop made progress (an iteration, a record, a step)."""
        self.last_beat = time.monotonic()

    def problem(self, name: str, detail: str | None) -> None:
        """Report a problem under `name`; `None` clears it."""
        if detail is None:
            self.problems.pop(name, None)
        else:
            self.problems[name] = detail

    def report(self) -> Report:
        """Healthy when beating within `stall_after_s`, not stopped, and without problems."""
        idle = time.monotonic() - self.last_beat
        problems = dict(self.problems)
        if idle > self.stall_after_s:
            problems["stalled"] = f"no progress for {idle:.0f}s (limit {self.stall_after_s:.0f}s)"
        if self.stopped:
            problems["stopped"] = "the service loop has ended"
        return not problems, {"since_progress_s": round(idle, 1), "problems": problems}


class OpsServer:
    """Serves `/metrics` from a registry and `/healthz` from a report function, in a daemon thread."""

    def __init__(
        self,
        registry: CollectorRegistry,
        report: Callable[[], Report],
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._server = ThreadingHTTPServer((host, port), _handler(registry, report))
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="ops-http", daemon=True)

    def start(self) -> OpsServer:
        """Start serving."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()


def start_ops(
    ops: OpsSettings, service: str, registry: CollectorRegistry, report: Callable[[], Report]
) -> OpsServer | None:
    """The ops server of a service when `ops.port` is set (else None: no endpoint)."""
    if ops.port is None:
        return None
    server = OpsServer(registry, report, ops.host, ops.port).start()
    logger.info("%s: /healthz and /metrics on http://%s:%d", service, ops.host, server.port)
    return server


def _handler(registry: CollectorRegistry, report: Callable[[], Report]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                ok, details = report()
                body = json.dumps({"status": "ok" if ok else "unhealthy", **details}).encode() + b"\n"
                self._reply(200 if ok else 503, body, "application/json")
            else:
                self._reply(404, b"not found: try /metrics or /healthz\n", "text/plain")

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - base signature
            logger.debug("ops http: " + format, *args)

    return Handler
