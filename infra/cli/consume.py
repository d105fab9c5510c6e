"""`convdb consume NAME|all`: run consumer plugins as a long-lived service until SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from types import FrameType

from consumers import plugins
from consumers.errors import PluginError
from consumers.metrics import MetricsServer
from consumers.runner import Runner
from infra.cli._common import UsageError, load_settings, non_negative, positive, require_broker

logger = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the `consume` command."""
    p = sub.add_parser(
        "consume",
        help="run consumers (views, index, titles, stats, or any plugin) exactly-once into the store",
        description="Runs the named consumer plugins in one process: one consumer group, one store "
        "transaction per batch. 'all' means " + ", ".join(plugins.DEFAULT_GROUP) + ".",
    )
    p.add_argument("names", nargs="+", metavar="NAME", help="plugin name(s), or 'all'")
    p.add_argument("--metrics-port", type=non_negative, metavar="P", help="serve /metrics and /healthz on P")
    p.add_argument("--metrics-host", default="127.0.0.1", help="address for the metrics server")
    p.add_argument("--batch-size", type=positive, default=5000, metavar="N", help="records per batch")
    p.set_defaults(func=_consume)


def _consume(args: argparse.Namespace) -> int:
    settings = require_broker(load_settings())
    known = set(plugins.available()) | {"all"}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        raise UsageError(f"unknown consumer(s) {unknown}; installed: {sorted(known)}")
    try:
        projectors = plugins.load_many(args.names, settings)
    except PluginError as exc:
        raise UsageError(str(exc)) from exc
    services = [p for p in projectors if not hasattr(p, "apply")]
    if services:
        if len(projectors) > 1:
            raise UsageError(f"{services[0].name} is a service with its own loop: run it alone")
        return _serve(services[0])
    name = args.names[0] if len(args.names) == 1 else "+".join(sorted(p.name for p in projectors))
    runner = Runner(settings, projectors, name=name, batch_size=args.batch_size)
    server = None
    if args.metrics_port is not None:
        server = MetricsServer(runner.metrics, args.metrics_host, args.metrics_port).start()
        logger.warning("consumer %s: metrics on http://%s:%s/metrics", name, args.metrics_host, server.port)

    def _stop(signum: int, _frame: FrameType | None) -> None:
        logger.warning("consumer %s: signal %s, finishing the batch", name, signum)
        runner.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        runner.run()
    finally:
        if server is not None:
            server.stop()
    return 0


def _serve(service: object) -> int:
    """Run a consumer that has its own loop (`run(stop)`, e.g. the archive) until SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    service.run(stop)  # type: ignore[attr-defined]
    return 0
