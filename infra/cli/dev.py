"""`convdb dev up|down|status`: a local broker (embedded or Apache Kafka) and S3 in the background;
`convdb dev tracker`: the demo's issue tracker (a real HTTP provider honouring idempotency keys)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from convdb.infra.cli._common import UsageError
from convdb.infra.connection import DevStack, read_stack, stack_file
from convdb.infra.dev import devstack
from convdb.infra.dev.choice import BROKER_CHOICES, choose, describe
from convdb.infra.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `dev` command."""
    dev = sub.add_parser("dev", help="run a local broker and S3 in the background")
    actions = dev.add_subparsers(dest="action", required=True, metavar="ACTION")
    p_up = actions.add_parser("up", help="start them (no-op if running); info in CONVDB_DATA_DIR")
    p_up.add_argument(
        "--persistent", action="store_true", help="keep broker data on the local S3 across restarts"
    )
    p_up.add_argument("--no-s3", action="store_true", help="broker only, no local S3")
    p_up.add_argument(
        "--broker",
        choices=BROKER_CHOICES,
        default="auto",
        help="auto (default): Apache Kafka where Java 17+ is on the machine (its jars cached, or Maven to "
        "fetch them), else the embedded one; embedded: Tansu from the wheel (pip only); apache: Apache Kafka",
    )
    p_up.set_defaults(func=_up)
    actions.add_parser("down", help="stop them").set_defaults(func=_down)
    actions.add_parser("status", help="show what runs and where").set_defaults(func=_status)
    p_tracker = actions.add_parser("tracker", help="run the demo's issue tracker until SIGTERM")
    p_tracker.add_argument("--port", type=int, required=True)
    p_tracker.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 in a container)")
    p_tracker.add_argument("--receipts-url", help="POST a signed receipt here after each issue")
    p_tracker.add_argument("--provider-name", default="tracker")
    p_tracker.add_argument("--receipt-secret", default="", help="HMAC-SHA256 key for receipts")
    p_tracker.set_defaults(func=_tracker)
    p_schema = actions.add_parser(
        "schema", help="write the next NAME.vN.avsc from the record's model (when the model changed)"
    )
    p_schema.add_argument("names", nargs="+", metavar="NAME", help="record name, e.g. MessageEvent")
    p_schema.add_argument("--dir", type=Path, help="where to write (default: the shipped schemas' folder)")
    p_schema.set_defaults(func=_schema)


def _up(args: argparse.Namespace) -> int:
    settings = Settings()
    if args.persistent and args.broker == "apache":
        raise UsageError("--persistent is for the embedded broker (Apache Kafka keeps its data on disk)")
    # --persistent keeps Tansu's data on the local S3: the embedded broker, whatever auto would pick.
    choice = choose("embedded" if args.persistent and args.broker == "auto" else args.broker)
    current = read_stack(settings)
    if current is None or not current.alive:
        print(describe(choice), file=sys.stderr, flush=True)
    stack = devstack.up(settings, persistent=args.persistent, with_s3=not args.no_s3, broker=choice.kind)
    _print_state(settings, stack)
    return 0


def _down(_: argparse.Namespace) -> int:
    stopped = devstack.down(Settings())
    print(json.dumps({"state": "down", "stopped": stopped}))
    return 0


def _status(_: argparse.Namespace) -> int:
    settings = Settings()
    stack = read_stack(settings)
    if stack is None:
        print(json.dumps({"state": "down"}))
        return 1
    _print_state(settings, stack)
    return 0 if stack.alive else 1


def _print_state(settings: Settings, stack: DevStack) -> None:
    """One JSON object, the same from `up` and `status`: state, addresses, pids, info file."""
    state = "up" if stack.alive else "dead (run `convdb dev down`, then `convdb dev up`)"
    info = str(stack_file(settings))
    print(json.dumps({"state": state, **stack.__dict__, "info": info}, indent=2))


def _tracker(args: argparse.Namespace) -> int:
    from convdb.infra.dev.tracker.server import ProviderState, ReceiptTarget, make_server

    receipts = (
        ReceiptTarget(args.receipts_url, args.provider_name, args.receipt_secret)
        if args.receipts_url
        else None
    )
    server = make_server(args.port, ProviderState(receipts=receipts), args.host)

    def stop(*_: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"tracker ready on http://{args.host}:{args.port}", flush=True)
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    return 0


def _schema(args: argparse.Namespace) -> int:
    from convdb.infra.dev.avsc import SchemaWriteError, write_next

    for name in args.names:
        try:
            path = write_next(name, args.dir)
        except SchemaWriteError as exc:
            raise UsageError(str(exc)) from exc
        print(f"{name}: wrote {path}" if path else f"{name}: the latest shipped schema matches the model")
    return 0
