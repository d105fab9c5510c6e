"""A minimal OTLP/HTTP trace receiver for tests: services export to it with their standard exporter."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, with the service (resource `service.name`) that sent it."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, str]


class OtlpReceiver:
    """Accepts `POST /v1/traces` (protobuf) on 127.0.0.1 and keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def received(self) -> list[ReceivedSpan]:
        """A copy of the spans received so far."""
        with self._lock:
            return list(self.spans)

    def _keep(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        found = []
        for resource in request.resource_spans:
            attrs = {a.key: a.value.string_value for a in resource.resource.attributes}
            service = attrs.get("service.name", "")
            for scope in resource.scope_spans:
                for span in scope.spans:
                    found.append(
                        ReceivedSpan(
                            service=service,
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes={
                                a.key: str(a.value.string_value or a.value.int_value) for a in span.attributes
                            },
                        )
                    )
        with self._lock:
            self.spans.extend(found)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._keep(body)  # noqa: SLF001 - the handler is part of the receiver
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_: object) -> None:
                return  # quiet: one line per export otherwise

        return Handler
