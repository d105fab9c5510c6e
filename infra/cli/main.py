"""`convdb` entry point: parses arguments, runs one command, maps errors to exit codes.

Exit codes: 0 success, 1 failure (infrastructure, or a check that failed), 2 bad input.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from confluent_kafka import KafkaException

from infra.cli._common import UsageError
from schemas.errors import ConvdbError

COMMAND_MODULES = (
    "infra.cli.dev",
    "infra.cli.topics",
    "infra.cli.init",
    "infra.cli.tail",
    "infra.cli.run",
    "infra.cli.demo",
    "infra.cli.consume",
    "infra.cli.serve",
    "infra.cli.replay",
    "infra.cli.audit",
    "infra.cli.export",
    "infra.cli.reconcile",
    "infra.cli.runner",
)
"""Modules that register subcommands, in help order; each has `register(subparsers)`."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command registered."""
    parser = argparse.ArgumentParser(
        prog="convdb", description="Conversation as database: agent conversations on Kafka."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        parser.exit(2, f"convdb: error: {exc}\n")
    except ConvdbError as exc:
        print(f"convdb: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KafkaException as exc:
        # A broker that is configured but unreachable surfaces here from any command.
        error = exc.args[0] if exc.args else exc
        reason = error.str() if hasattr(error, "str") else str(error)
        print(f"convdb: Kafka error: {reason} (is the broker reachable?)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
