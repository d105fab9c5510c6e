"""The query API's app factory: FastAPI over the projection store, API keys mapped to tenants.

Routers come from an explicit list of modules (`ROUTERS`), each exposing `router`; another
service adds its endpoints by passing a longer list (e.g. receipts, operations).
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import unquote_to_bytes

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from convdb.consumers.api import observe
from convdb.consumers.api._slots import TenantScope, WriteShareError
from convdb.consumers.api.deps import ApiContext
from convdb.consumers.api.params import Problem, refuse_unknown_query
from convdb.consumers.errors import QueryInputError
from convdb.consumers.store import lock_schema, open_engine
from convdb.infra.errors import NoBrokerError, PublishError
from convdb.infra.secrets import SecretsRegistry
from convdb.infra.settings import Settings
from convdb.projections.errors import QueryError
from convdb.schemas import make_codec

logger = logging.getLogger(__name__)

ROUTERS: tuple[str, ...] = (
    "convdb.consumers.api.conversations",
    "convdb.consumers.api.tree",
    "convdb.consumers.api.events",
    "convdb.consumers.api.messages",
    "convdb.consumers.api.history",
    "convdb.consumers.api.receipts",
    "convdb.consumers.api.operations",
    "convdb.consumers.api.observe",
    "convdb.consumers.api.openhands",
    "convdb.consumers.console",
)
"""Router modules included by default, in OpenAPI order."""


def create_app(
    settings: Settings, routers: Sequence[str] = ROUTERS, secrets: SecretsRegistry | None = None
) -> FastAPI:
    """The API app: reads the store at `settings.resolved_store_url`, writes to the inbox topic.

    `secrets`: the registry that redacts what the API writes (default: `CONVDB_SECRETS` and patterns).
    """
    app = FastAPI(
        lifespan=_lifespan,
        title="convdb query API",
        description="Conversations, their active-branch views, titles, stats and events, per tenant. "
        "Authenticate with the `X-API-Key` header.",
        version="1",
        **observe.fastapi_options(),
    )
    engine = open_engine(settings.resolved_store_url, writer=False)
    registry = secrets or SecretsRegistry(settings.secret_values())
    app.state.ctx = ApiContext(settings, engine, make_codec(settings.schema_registry_url), secrets=registry)
    _ensure_tables(settings.resolved_store_url)
    app.add_middleware(TenantScope)
    observe.install(app)
    app.add_middleware(RefuseControlCharacters)
    if settings.api.trusted_proxies:
        # Outermost, so that every layer sees the forwarded client; `convdb serve` turns
        # uvicorn's own handling off (it trusts 127.0.0.1 by default, i.e. any local caller).
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=list(settings.api.trusted_proxies))
    for name in routers:
        # The API's routes refuse query parameters they do not declare; the console's pages are
        # links a browser follows, and the OpenHands webhooks are another program's protocol:
        # both keep answering them.
        lenient = name.startswith(("convdb.consumers.console", "convdb.consumers.api.openhands"))
        checked = [] if lenient else [Depends(refuse_unknown_query)]
        app.include_router(importlib.import_module(name).router, dependencies=checked)
    app.add_exception_handler(RequestValidationError, _bad_request)
    app.add_exception_handler(QueryError, _query_error)
    app.add_exception_handler(QueryInputError, _query_error)
    app.add_exception_handler(PublishError, _unavailable)
    app.add_exception_handler(NoBrokerError, _no_broker)
    app.add_exception_handler(WriteShareError, _over_share)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, saying what the API really answers: 400 (with `Problem`), never 422."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                responses = operation.get("responses", {})
                if responses.pop("422", None) is not None and "400" not in responses:
                    responses["400"] = {
                        "description": "bad input: the message names the parameter and the rule",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
                    }
        components = schema.get("components", {}).get("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
        components.setdefault("Problem", Problem.model_json_schema())
        app.openapi_schema = schema
    return app.openapi_schema


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    ctx: ApiContext = app.state.ctx
    ctx.close()
    for close in getattr(app.state, "closers", ()):
        close()


def _ensure_tables(url: str) -> None:
    # The API may start before any consumer: create the read tables (idempotent, no version
    # row) so that queries answer "nothing yet" instead of failing. A writer engine takes
    # SQLite's write lock at BEGIN, so this waits for a busy consumer instead of failing with
    # "database is locked" when a read snapshot would have to be upgraded.
    from convdb.consumers.console.revoked import metadata as console_tables
    from convdb.consumers.effects.tables import metadata as effects_tables
    from convdb.consumers.index.tables import metadata as index_tables
    from convdb.consumers.stats.projector import metadata as stats_tables
    from convdb.consumers.store import metadata as offsets_tables
    from convdb.consumers.titles.tables import metadata as titles_tables
    from convdb.consumers.views.tables import metadata as views_tables

    engine = open_engine(url)
    try:
        with engine.begin() as conn:
            lock_schema(conn)  # a consumer starting at the same moment creates the same tables
            # The offsets too: who owns a conversation is read from how far the read side got.
            for metadata in (
                views_tables,
                index_tables,
                stats_tables,
                titles_tables,
                effects_tables,
                offsets_tables,
                console_tables,  # signed-out console sessions, shared by every API replica
            ):
                metadata.create_all(conn)
    finally:
        engine.dispose()


async def _bad_request(_request: Request, exc: Exception) -> JSONResponse:
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    # Messages name the field and the rule, never the whole input (it may be megabytes).
    problems = [
        f"`{'.'.join(str(p)[:40] for p in e['loc'] if p not in ('query', 'body', 'path'))}`: {e['msg'][:300]}"
        for e in errors[:10]
    ]
    return JSONResponse({"detail": "bad request: " + "; ".join(problems)}, status_code=400)


class RefuseControlCharacters:
    """ASGI middleware: 400 for a URL whose path or query holds a control character.

    No identifier, filter, cursor or time has one (`convdb.schemas.validation`); refusing them here,
    once, keeps them from every route, the console's included, and from every store query.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Pass the request on, or answer 400."""
        if scope["type"] == "http" and (
            _CONTROL.search(scope["path"]) or _CONTROL_BYTES.search(unquote_to_bytes(scope["query_string"]))
        ):
            response = JSONResponse(
                {"detail": "bad request: the URL holds a control character"}, status_code=400
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BYTES = re.compile(rb"[\x00-\x1f\x7f]")


async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
    settings = request.app.state.ctx.settings
    # Where the address came from (set by `convdb serve`): what an operator fixes.
    source = getattr(request.app.state, "broker_source", None)
    where = f"{settings.bootstrap_servers} (from {source})" if source else settings.bootstrap_servers
    return JSONResponse(
        {"detail": f"not acknowledged by the broker at {where}, retry later: {exc}"}, status_code=503
    )


async def _no_broker(_request: Request, _exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": observe.NO_BROKER}, status_code=503)


async def _over_share(_request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(
        {"detail": f"too many writes at once: {exc}"}, status_code=429, headers={"Retry-After": "1"}
    )


async def _query_error(_request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=400)
