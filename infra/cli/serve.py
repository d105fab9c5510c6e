"""`convdb serve`: run the query API (FastAPI on uvicorn) over the projection store."""

from __future__ import annotations

import argparse

from infra.cli._common import load_settings, positive, refuse_sample_credentials


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the `serve` command."""
    p = sub.add_parser("serve", help="run the query API (OpenAPI docs at /docs)")
    p.add_argument("--host", help="bind address (default: CONVDB_API__HOST)")
    p.add_argument("--port", type=positive, help="port (default: CONVDB_API__PORT)")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from consumers.api import create_app

    settings = load_settings()
    refuse_sample_credentials(settings)
    app = create_app(settings)
    uvicorn.run(
        app,
        host=args.host or settings.api.host,
        port=args.port or settings.api.port,
        log_level="warning",
    )
    return 0
