"""`convdb reconcile`: run the effect reconciler (a faust worker) until SIGTERM."""

from __future__ import annotations

import argparse
import logging

from convdb.infra.cli._common import require_broker
from convdb.infra.connection import load_settings
from convdb.infra.kafka import apply_topics
from convdb.infra.logs import level_of, logging_config
from convdb.infra.ops import start_ops
from convdb.schemas.topics import ALL_TOPICS

logger = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `reconcile` command."""
    p = sub.add_parser(
        "reconcile",
        help="run the effect reconciler (receipts, lookups, deadlines) until SIGTERM",
        description="Matches agent actions against provider receipts and lookups, and publishes "
        "effect-ledger transitions (confirmed, retry approved, unknown) to the effects topic.",
    )
    p.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        help="worker log level (default: CONVDB_OPS__LOG_LEVEL, else info)",
    )
    p.set_defaults(func=_reconcile)


def _reconcile(args: argparse.Namespace) -> int:
    # imported here: faust is slow to import and only this command needs it
    from convdb.consumers.reconciler import CHANGELOG, Worker, build_app

    settings = require_broker(load_settings())
    # Every topic, the changelog included, must exist with one partition count before anything
    # produces to it: an auto-created topic gets 4 partitions and breaks the co-partitioning.
    apply_topics(settings, (*ALL_TOPICS, CHANGELOG))
    app = build_app(settings)
    reconciler = app.reconciler  # type: ignore[attr-defined]
    ops = start_ops(settings.ops, "reconciler", reconciler.metrics.registry, reconciler.health.report)
    level = args.log_level.upper() if args.log_level else level_of(settings.ops, service=True)
    # faust's worker replaces the process's logging set-up with its own: hand it convdb's.
    worker = Worker(
        app,
        stop_grace_s=settings.ops.stop_grace_s,
        loglevel=level,
        logging_config=logging_config(settings.ops, level),
        quiet=True,
        redirect_stdouts=False,
    )
    try:
        worker.execute_from_commandline()  # returns by SystemExit once SIGTERM/SIGINT stopped it
    finally:
        if ops is not None:
            ops.stop()
    return 0
