"""The API's own observability: `/healthz`, `/metrics`, and a metric and a span per request.

`/healthz` is truthful: 503 while the store does not answer. Each request is counted by route
template, method and status, timed, and traced as a SERVER span that continues the caller's
W3C `traceparent` (so a message posted to the inbox starts, or joins, its trace here).
"""

from __future__ import annotations

import inspect
import time
from contextlib import nullcontext
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from opentelemetry import propagate
from opentelemetry.trace import SpanKind
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from convdb.infra import tracing
from convdb.infra.ops import Report

router = APIRouter(tags=["operations"])

UNTRACED = ("/healthz", "/metrics")
"""Probe and scrape paths: counted, never traced (one span every few seconds per pod is noise)."""


class ApiMetrics:
    """Requests by route, method and status, and their latency, in the app's own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "convdb_api_requests",
            "API requests by route template, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "convdb_api_request_seconds",
            "API request latency by route template and method",
            ["route", "method"],
            buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )


class ObserveRequests:
    """ASGI middleware (not `BaseHTTPMiddleware`: no extra task per request on the ingest path)."""

    def __init__(self, app: Any, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Time, count and trace one HTTP request."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, status = scope["method"], [500]

        async def send_status(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        started = time.perf_counter()
        traced = tracing.enabled() and scope["path"] not in UNTRACED
        parent = _caller_context(scope) if traced else None
        with _server_span(traced, method, parent) as span:
            try:
                await self.app(scope, receive, send_status)
            finally:
                route = getattr(scope.get("route"), "path", "unmatched")
                self.metrics.requests.labels(route, method, str(status[0])).inc()
                self.metrics.latency.labels(route, method).observe(time.perf_counter() - started)
                if span is not None:
                    span.update_name(f"api {method} {route}")
                    span.set_attributes({"http.route": route, "http.response.status_code": status[0]})


def fastapi_options() -> dict[str, Any]:
    """`FastAPI(...)` arguments: recent FastAPI traces requests natively; convdb's middleware
    already does (spans named in convdb's vocabulary, one metrics registry), so that is off."""
    if "telemetry" not in inspect.signature(FastAPI).parameters:
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}}


def install(app: FastAPI) -> ApiMetrics:
    """Add the middleware; the metrics live on `app.state.metrics` (served at `/metrics`)."""
    metrics = ApiMetrics()
    app.state.metrics = metrics
    app.add_middleware(ObserveRequests, metrics=metrics)
    return metrics


NO_BROKER = (
    "no broker configured: CONVDB_BOOTSTRAP_SERVERS is unset and no dev stack runs (`convdb dev up`); "
    "writes answer 503"
)
"""What /healthz and every write say when the API was started without a broker."""


def health(app: FastAPI) -> Report:
    """Healthy while the store answers a trivial query and a broker is configured."""
    try:
        with app.state.ctx.engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except SQLAlchemyError as exc:
        return False, {"problems": {"store": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}}
    if not app.state.ctx.settings.bootstrap_servers:
        # Reads work, but every write would fail: not a state to route users' posts to.
        return False, {"problems": {"broker": NO_BROKER}}
    return True, {"problems": {}}


@router.get(
    "/healthz",
    summary="200 while the API can serve (its store answers), else 503",
    responses={503: {"description": "unhealthy: `problems` says why"}},
)
def healthz(request: Request) -> JSONResponse:
    """The API's health, for readiness and liveness probes."""
    ok, details = health(request.app)
    return JSONResponse({"status": "ok" if ok else "unhealthy", **details}, status_code=200 if ok else 503)


@router.get("/metrics", summary="Prometheus metrics of this API process", include_in_schema=False)
def metrics(request: Request) -> Response:
    """The app's registry in the Prometheus text format."""
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _caller_context(scope: dict[str, Any]) -> Any:
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}
    return propagate.extract(headers) if "traceparent" in headers else None


def _server_span(traced: bool, method: str, parent: Any) -> Any:
    if not traced:
        return nullcontext(None)
    return tracing.span(f"api {method}", kind=SpanKind.SERVER, parent=parent)
