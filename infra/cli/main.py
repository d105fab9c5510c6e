"""`convdb` entry point: parses arguments, runs one command, maps errors to exit codes.

Exit codes: 0 success, 1 failure (infrastructure, or a check that failed), 2 bad input.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import os
import signal
import sys
from importlib.metadata import version as package_version
from typing import Any, NoReturn

from confluent_kafka import KafkaException
from pydantic import ValidationError
from pydantic_settings import SettingsError

from convdb.infra.cli._common import UsageError
from convdb.infra.logs import configure_logging
from convdb.infra.settings import Settings
from convdb.infra.tracing import setup_tracing
from convdb.schemas.errors import ConvdbError

COMMAND_MODULES = (
    "convdb.infra.cli.dev",
    "convdb.infra.cli.topics",
    "convdb.infra.cli.init",
    "convdb.infra.cli.tail",
    "convdb.infra.cli.run",
    "convdb.infra.cli.demo",
    "convdb.infra.cli.consume",
    "convdb.infra.cli.serve",
    "convdb.infra.cli.replay",
    "convdb.infra.cli.audit",
    "convdb.infra.cli.export",
    "convdb.infra.cli.fork",
    "convdb.infra.cli.openhands",
    "convdb.infra.cli.reconcile",
    "convdb.infra.cli.runner",
    "convdb.infra.cli.config",
)
"""Modules that register subcommands, in help order; each has `register(subparsers)`."""


SERVICES = {"serve": "api", "runner": "runner", "reconcile": "reconciler", "consume": "consumer"}
"""Long-running commands: they log at INFO, trace, and serve the ops endpoint (name = service)."""


def service_name(args: argparse.Namespace) -> str | None:
    """The service a command line runs (`consume archive` is the archive), or None for a command."""
    service = SERVICES.get(args.command)
    if service == "consumer" and getattr(args, "names", None) == ["archive"]:
        return "archive"
    return service


def _settings_error(exc: SettingsError) -> str:
    # 'error parsing value for field "api" from source "EnvSettingsSource"': name the variable.
    field = str(exc).split('"')[1] if str(exc).count('"') >= 2 else ""
    return f"CONVDB_{field.upper()}__*: not valid JSON or not the expected shape" if field else str(exc)[:300]


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = "CONVDB_" + "__".join(str(p) for p in error["loc"]).upper()
    return f"{where}: {error['msg']}"


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (with where to find help), exit code 2, and an
    option is only ever taken by its full name (`--conversation` is not `--conversations`).
    Subcommand parsers are of this class too (argparse makes them of the parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Print `prog: error: message` and exit 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} -h)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command registered."""
    parser = OneLineParser(
        prog="convdb", description="Conversation as database: agent conversations on Kafka."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    parser.add_argument("--version", action="version", version=f"convdb {package_version('convdb')}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse binds an optional positional before the options that follow it: a command names
    # the positional (`late_positional`) that may come after them, e.g. `export CONV --format X DIR`.
    late = getattr(args, "late_positional", None)
    if extra and (
        late is None or len(extra) != 1 or getattr(args, late) is not None or extra[0].startswith("-")
    ):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra and late is not None:  # else the parser exited above
        setattr(args, late, extra[0])
    try:
        ops = Settings().ops
    except ValidationError as exc:
        parser.exit(2, f"convdb: error: bad configuration: {_first_error(exc)}\n")
    except SettingsError as exc:
        # pydantic-settings could not parse a value at all (e.g. JSON of a dict setting).
        parser.exit(2, f"convdb: error: bad configuration: {_settings_error(exc)}\n")
    service = service_name(args)
    configure_logging(ops, service=service is not None, verbose=args.verbose)
    if service is not None:
        # `kill -USR1 PID` prints every thread's stack to stderr: what a stuck service is doing.
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        try:
            setup_tracing(service, llm=service == "runner")
        except (RuntimeError, ValueError) as exc:  # the SDK's words for a bad OTEL_* setting
            parser.exit(2, f"convdb: error: bad OpenTelemetry configuration (OTEL_*): {exc}\n")
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
    except BrokenPipeError:
        # The reader went away (`convdb tail | head`): stop quietly, as a Unix filter does on
        # SIGPIPE, and keep the interpreter's final flush from failing on the closed pipe too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:  # noqa: BLE001 - the CLI boundary: one line, never a traceback as UI
        if args.verbose:
            raise
        print(f"convdb: unexpected {type(exc).__name__}: {str(exc)[:500]} (-v shows where)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
