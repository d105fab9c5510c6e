"""`convdb runner`: a fleet runner service (one member of the `<namespace>.runner` group).

Start as many as needed; partitions of the inbox move between them with no operator action.
Each prints JSON status lines (assigned, takeover, fenced, ...) and stops on SIGTERM.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from convdb.infra.cli._common import (
    AGENT_HELP,
    GRAPH_HELP,
    SECRETS_FILE_HELP,
    UsageError,
    require_broker,
    with_secrets_file,
)
from convdb.infra.connection import load_settings
from convdb.producers.errors import AgentLoadError, UnknownAgentError
from convdb.producers.fleet.service import build_context, serve


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `runner` command."""
    p = sub.add_parser(
        "runner", help="run a fleet runner: owns inbox partitions and runs their conversations"
    )
    p.add_argument(
        "--workspace", type=Path, help="folder the file tools work in (default: <data dir>/workspace)"
    )
    p.add_argument("--tracker-url", metavar="URL", help="issue-tracker provider for create_issue/notify")
    p.add_argument("--model", help="litellm model (default: settings)")
    p.add_argument(
        "--agent",
        metavar="NAME|MODULE:ATTR",
        help=AGENT_HELP + "; conversations whose first message names another agent run that one",
    )
    p.add_argument("--graph", metavar="NAME|MODULE:ATTR", help=GRAPH_HELP)
    p.add_argument(
        "--idle-exit",
        type=float,
        default=0.0,
        metavar="S",
        help="exit after S idle seconds, counted from the first assignment (default: never)",
    )
    p.add_argument("--secrets-file", type=Path, metavar="FILE", help=SECRETS_FILE_HELP)
    p.set_defaults(func=_runner)


def _runner(args: argparse.Namespace) -> int:
    if not 0 <= args.idle_exit < float("inf"):
        raise UsageError(f"--idle-exit must be >= 0 (seconds), not {args.idle_exit}")
    settings = with_secrets_file(require_broker(load_settings()), args.secrets_file)
    workspace = args.workspace or settings.data_dir / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    try:
        ctx = build_context(
            settings, workspace, args.tracker_url, args.model, agent=args.agent, graph=args.graph
        )
    except (UnknownAgentError, AgentLoadError) as exc:
        raise UsageError(str(exc)) from exc
    return serve(ctx, args.idle_exit)
