"""Dependencies every router shares: the API context (settings, store, codec), tenant auth."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Header, HTTPException, Request
from sqlalchemy.engine import Connection, Engine

from infra.settings import Settings
from schemas import Codec


@dataclass
class ApiContext:
    """What the routers need; built once by `create_app` and kept on `app.state.ctx`."""

    settings: Settings
    engine: Engine
    codec: Codec
    extras: dict[str, Any] = field(default_factory=dict)
    """Lazily built collaborators (e.g. the inbox producer), by name."""


def context(request: Request) -> ApiContext:
    """The app's context."""
    return request.app.state.ctx  # type: ignore[no-any-return]


def tenant(
    request: Request,
    x_api_key: Annotated[str | None, Header(description="API key; it decides the tenant you see.")] = None,
) -> str:
    """The tenant of the request's `X-API-Key`; 401 when it is missing or unknown."""
    if not x_api_key:
        raise HTTPException(401, "missing X-API-Key header", headers={"WWW-Authenticate": "ApiKey"})
    found = context(request).settings.api.keys.get(x_api_key)
    if found is None:
        raise HTTPException(401, "unknown API key", headers={"WWW-Authenticate": "ApiKey"})
    return found


def connection(request: Request) -> Iterator[Connection]:
    """A read connection to the store for one request."""
    with context(request).engine.connect() as conn:
        yield conn


Tenant = Annotated[str, Depends(tenant)]
"""The authenticated tenant id."""

Conn = Annotated[Connection, Depends(connection)]
"""A store connection."""

Ctx = Annotated[ApiContext, Depends(context)]
"""The API context."""
