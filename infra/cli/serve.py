"""`convdb serve`: run the query API (FastAPI on uvicorn) over the projection store."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from convdb.infra.cli._common import SECRETS_FILE_HELP, port, refuse_sample_credentials
from convdb.infra.connection import broker_source, load_settings
from convdb.infra.ops import start_ops
from convdb.infra.secrets import registry_for

logger = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `serve` command."""
    p = sub.add_parser("serve", help="run the query API (OpenAPI docs at /docs)")
    p.add_argument("--host", help="bind address (default: CONVDB_API__HOST)")
    p.add_argument("--port", type=port, help="port (default: CONVDB_API__PORT)")
    p.add_argument("--secrets-file", type=Path, metavar="FILE", help=SECRETS_FILE_HELP)
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from convdb.consumers.api import create_app
    from convdb.consumers.api.observe import health

    settings = load_settings()
    refuse_sample_credentials(settings)
    if settings.api.session_secret is None and not settings.dev_mode:
        logger.warning(
            "CONVDB_API__SESSION_SECRET is unset: console sessions are signed with a random key of this "
            "process, so they end when it restarts and, with more than one API replica, a session "
            "started on one is refused by the others (sign-in loops). Set the same secret on every "
            "replica (infra/deploy: API_SESSION_SECRET, convdb-secrets)."
        )
    app = create_app(settings, secrets=registry_for(settings.secret_values(), args.secrets_file))
    app.state.broker_source = broker_source(settings) if settings.bootstrap_servers else None
    host, port = args.host or settings.api.host, args.port or settings.api.port
    # The API answers /healthz and /metrics itself; the ops port serves the same for probes and
    # scrapers that use one port for every convdb service.
    ops = start_ops(settings.ops, "api", app.state.metrics.registry, lambda: health(app))
    logger.info("api: serving on http://%s:%d (store %s)", host, port, app.state.ctx.engine.url)
    try:
        # The app believes forwarded headers from CONVDB_API__TRUSTED_PROXIES only; uvicorn's own
        # handling would trust any local peer's X-Forwarded-For.
        uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=False)
    finally:
        if ops is not None:
            ops.stop()
    return 0
