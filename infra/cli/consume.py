"""`convdb consume NAME|all`: run consumer plugins as a long-lived service until SIGTERM."""

from __future__ import annotations

import argparse
import logging
import threading

from convdb.consumers import plugins
from convdb.consumers.errors import PluginError
from convdb.consumers.runner import Runner
from convdb.infra.cli._common import UsageError, port_or_zero, positive, require_broker
from convdb.infra.connection import load_settings
from convdb.infra.ops import OpsServer, start_ops
from convdb.infra.procs import on_stop_signal
from convdb.infra.settings import Settings

logger = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `consume` command."""
    p = sub.add_parser(
        "consume",
        help="run consumers (views, index, titles, stats, or any plugin) exactly-once into the store",
        description="Runs the named consumer plugins in one process: one consumer group, one store "
        "transaction per batch. 'all' means " + ", ".join(plugins.DEFAULT_GROUP) + ".",
    )
    p.add_argument("names", nargs="+", metavar="NAME", help="plugin name(s), or 'all'")
    p.add_argument(
        "--metrics-port",
        type=port_or_zero,
        metavar="P",
        help="serve /metrics and /healthz on P (default: CONVDB_OPS__PORT)",
    )
    p.add_argument("--metrics-host", help="address of the metrics server (default: CONVDB_OPS__HOST)")
    p.add_argument("--batch-size", type=positive, default=5000, metavar="N", help="records per batch")
    p.set_defaults(func=_consume)


def _consume(args: argparse.Namespace) -> int:
    settings = require_broker(load_settings())
    ops = settings.ops.model_copy(
        update={
            "port": _first(args.metrics_port, settings.ops.port),
            "host": args.metrics_host or settings.ops.host,
        }
    )
    settings = settings.model_copy(update={"ops": ops})
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
        return _serve(services[0], settings)
    name = args.names[0] if len(args.names) == 1 else "+".join(sorted(p.name for p in projectors))
    runner = Runner(settings, projectors, name=name, batch_size=args.batch_size)
    runner.metrics.stall_after_s = settings.ops.stall_after_s
    server = start_ops(settings.ops, f"consumer {name}", runner.metrics.registry, runner.metrics.report)

    on_stop_signal(runner.stop, f"consumer {name}", settings.ops.stop_grace_s)
    logger.info("consumer %s: applying %s into %s", name, ", ".join(sorted(runner.topics)), runner.engine.url)
    try:
        runner.run()
    finally:
        _stop_ops(server)
    return 0


def _serve(service: object, settings: Settings) -> int:
    """Run a consumer that has its own loop (`run(stop)`, e.g. the archive) until SIGTERM."""
    stop = threading.Event()
    on_stop_signal(stop.set, getattr(service, "name", "consumer"), settings.ops.stop_grace_s)
    registry, health = getattr(service, "metrics", None), getattr(service, "health", None)
    server = None
    if registry is not None and health is not None:
        server = start_ops(settings.ops, service.name, registry.registry, health.report)  # type: ignore[attr-defined]
    try:
        service.run(stop)  # type: ignore[attr-defined]
    finally:
        _stop_ops(server)
    return 0


def _first(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)


def _stop_ops(server: OpsServer | None) -> None:
    if server is not None:
        server.stop()
